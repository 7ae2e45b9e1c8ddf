package journeys

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/runtime"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// agentResult is what mesh_execute returned, as the action's output.
type agentResult struct {
	SessionID string         `json:"session_id"`
	Output    string         `json:"output"`
	Metadata  map[string]any `json:"metadata"`
}

// agentTask turns an action into a task for an agent worker.
func agentTask(a *meshtype.Action) string {
	where := func(t string) string {
		if t == "" || t == "." {
			return "the workspace root"
		}
		return t
	}
	switch a.Type {
	case meshtype.ActionRead:
		return "Read " + a.Target
	case meshtype.ActionWrite:
		return fmt.Sprintf("Write the following content to %s, replacing the file if it exists:\n\n%s", a.Target, a.Content)
	case meshtype.ActionList:
		return "List the files in " + where(a.Target)
	case meshtype.ActionSearch:
		return fmt.Sprintf("Search for the regular expression %s in %s and report the matching lines", strconv.Quote(a.Pattern), where(a.Target))
	case meshtype.ActionExec:
		quoted := make([]string, len(a.Command))
		for i, arg := range a.Command {
			quoted[i] = strconv.Quote(arg)
		}
		return "Run the command [" + strings.Join(quoted, " ") + "] and report its output"
	case meshtype.ActionDelete:
		return "Delete " + a.Target
	}
	return a.Task
}

// runAgent runs an action as a task through mesh_execute in the journey's
// agent container, resuming the journey's agent session, and records the
// session the agent reports.
func (m *Manager) runAgent(ctx context.Context, j store.Journey, entry *workerdef.Entry, a *meshtype.Action) (any, float64, error) {
	// mesh-exec stops the agent before the marketplace gives up on the call,
	// so a run that times out still returns its cost and session.
	agentTimeout := max(m.cfg.ActionTimeout-30*time.Second, m.cfg.ActionTimeout/2)
	args := map[string]any{
		"repository": runtime.WorkspacePath,
		"task":       agentTask(a),
		"timeout":    agentTimeout.Milliseconds(),
	}
	if j.AgentSessionID != "" {
		args["session_id"] = j.AgentSessionID
	}
	res, err := m.callWorker(ctx, j, entry, "mesh_execute", args)
	if err != nil {
		return nil, 0, err
	}
	var out agentResult
	if res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		if err == nil {
			_ = json.Unmarshal(raw, &out)
		}
	}
	cost, _ := out.Metadata["cost_usd"].(float64)
	if out.SessionID != "" && out.SessionID != j.AgentSessionID {
		// Saved at once: the next action, or a restarted marketplace, resumes it.
		if err := m.cfg.Store.SetAgentSession(context.WithoutCancel(ctx), j.UID, out.SessionID); err != nil {
			return nil, cost, err
		}
	}
	if res.IsError {
		return nil, cost, &Error{Code: "agent_error", Msg: toolText(res)}
	}
	return out, cost, nil
}

// nestedAccess mints the token an agent uses to call the marketplace back:
// its caller is the parent's caller and journey ("alice/research"), so it
// sees only the journeys it spawns itself, each with its own container and
// gate. It returns the environment entry that hands mesh-exec the MCP config.
func (m *Manager) nestedAccess(ctx context.Context, caller string, j store.Journey) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b)
	uid := j.UID
	// One live token per agent journey: a respawn's new container gets a new
	// one and the old one stops working.
	if err := m.cfg.Store.RevokeNested(ctx, uid); err != nil {
		return "", err
	}
	if err := m.cfg.Store.PutToken(ctx, caller+"/"+j.ID, store.TokenHash(token), &uid); err != nil {
		return "", err
	}
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"meshwork": map[string]any{
		"type": "http", "url": m.cfg.NestedMCPURL, "headers": map[string]string{"Authorization": "Bearer " + token},
	}}})
	if err != nil {
		return "", err
	}
	return "MESH_EXEC_MCP_CONFIG_JSON=" + string(cfg), nil
}
