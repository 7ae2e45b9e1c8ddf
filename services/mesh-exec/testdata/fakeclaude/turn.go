package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// turn is one headless run: one prompt, one turn of a session.
type turn struct {
	o       *options
	start   time.Time
	cwd     string
	store   *store
	servers map[string]mcpServer
	hooks   map[string][]hookMatcher
	script  *script
	out     *emitter

	sessionID  string
	transcript string
	model      string
	toolCalls  int
	lastText   string // the text of the last step, when it was a text step
}

func newTurn(o *options) *turn {
	model := o.model
	if model == "" {
		model = defaultModel
	}
	return &turn{o: o, start: time.Now(), out: &emitter{format: o.outputFormat}, model: model}
}

// run does the turn and returns the exit status.
func (t *turn) run() (int, error) {
	var err error
	if t.cwd, err = os.Getwd(); err != nil {
		return 0, err
	}
	if t.store, err = newStore(); err != nil {
		return 0, err
	}
	if t.servers, err = loadMCPConfigs(t.o.mcpConfigs); err != nil {
		return 0, fail(1, "Error: Invalid MCP configuration:\n%v", err)
	}
	if t.hooks, err = loadHooks(t.o.settings); err != nil {
		return 0, fail(1, "Error: %v", err)
	}
	sc, err := loadScript(scriptPath(t.cwd))
	if err != nil {
		return 0, fail(2, "fake claude: FAKE_CLAUDE_SCRIPT: %v", err)
	}

	// The session, before anything is printed: an unknown --resume id
	// prints a lone result (resume-unknown-session.jsonl), even when not
	// logged in.
	var earlier int // turns the session had before this one
	switch o := t.o; {
	case o.resume != nil:
		path, ok := t.store.find(t.cwd, *o.resume)
		if !ok {
			return t.unknownSession(*o.resume), nil
		}
		earlier = t.store.turns(path)
		if err := t.existing(*o.resume, path); err != nil {
			return 0, err
		}
	case o.cont:
		id, path, ok := t.store.latest(t.cwd)
		if !ok {
			return 0, fail(1, "No conversation found to continue")
		}
		earlier = t.store.turns(path)
		if err := t.existing(id, path); err != nil {
			return 0, err
		}
	default:
		t.sessionID = o.sessionID
		if t.sessionID == "" {
			t.sessionID = uuid.NewString()
		} else if _, taken := t.store.find(t.cwd, t.sessionID); taken {
			return 0, fail(1, "Error: Session ID %s is already in use.", t.sessionID)
		}
		t.transcript = t.store.path(t.cwd, t.sessionID)
	}
	t.script = sc.forTurn(earlier)

	// The turn is on disk before the session is announced: a caller that
	// saves the id from the init event and is cut off right after can
	// resume it.
	if !t.o.noPersist {
		if err := t.store.appendTurn(t.transcript, t.sessionID, t.cwd, t.o.prompt); err != nil {
			return 0, err
		}
	}
	t.out.event(t.initEvent())
	if os.Getenv("ANTHROPIC_API_KEY") == "" && os.Getenv("CLAUDE_CODE_OAUTH_TOKEN") == "" {
		return t.apiError("Not logged in · Please run /login", "authentication_failed"), nil
	}
	t.onSIGTERM()
	return t.steps(), nil
}

// existing continues the session at path, or with --fork-session starts a
// new session holding a copy of it.
func (t *turn) existing(id, path string) error {
	if !t.o.fork {
		t.sessionID, t.transcript = id, path
		return nil
	}
	t.sessionID = t.o.sessionID
	if t.sessionID == "" {
		t.sessionID = uuid.NewString()
	}
	t.transcript = t.store.path(t.cwd, t.sessionID)
	if t.o.noPersist {
		return nil
	}
	if err := t.store.fork(path, t.transcript); err != nil {
		return fmt.Errorf("forking session %s: %w", id, err)
	}
	return nil
}

// steps runs the script and prints the result; it returns the exit status.
func (t *turn) steps() int {
	for _, st := range t.script.Steps {
		t.lastText = ""
		switch {
		case st.Text != "":
			t.say(st.Text, "end_turn")
			t.lastText = st.Text
		case st.Write != nil:
			t.write(*st.Write)
		case st.Edit != nil:
			t.edit(*st.Edit)
		case st.Read != nil:
			t.read(*st.Read)
		case st.Bash != "":
			t.bash(st.Bash)
		case st.Tool != nil:
			t.otherTool(*st.Tool)
		case st.Notification != "":
			t.runHooks("Notification", "", map[string]any{"message": st.Notification, "notification_type": "idle_prompt"})
		case st.MCPCall != nil:
			t.mcpCall(*st.MCPCall)
		case st.UnknownEvent:
			t.out.event(map[string]any{
				"type": "fake_unknown_event", "subtype": "from_the_future",
				"detail": "an event type no parser knows", "session_id": t.sessionID, "uuid": uuid.NewString(),
			})
		case st.Event != nil:
			t.out.raw(st.Event)
		case st.Stderr != "":
			fmt.Fprintln(os.Stderr, st.Stderr)
		case st.Fail != nil:
			return t.apiError(*st.Fail, "unknown")
		case st.Crash != nil:
			if st.Crash.Stderr != "" {
				fmt.Fprintln(os.Stderr, st.Crash.Stderr)
			}
			return max(st.Crash.ExitCode, 1)
		case st.Hang != nil:
			t.hang(*st.Hang) // never returns
		case st.SleepMS > 0:
			time.Sleep(time.Duration(st.SleepMS) * time.Millisecond)
		}
	}
	t.runHooks("Stop", "", map[string]any{"stop_hook_active": false})
	reply := t.script.Reply
	switch {
	case reply == "" && t.lastText != "":
		reply = t.lastText // already said
	case reply == "":
		reply = "ok: " + t.o.prompt
		t.say(reply, "end_turn")
	default:
		t.say(reply, "end_turn")
	}
	cost := 0.0012
	if t.script.CostUSD != nil {
		cost = *t.script.CostUSD
	}
	in, out := int64(12), int64(3)
	if t.script.InputTokens != nil {
		in = *t.script.InputTokens
	}
	if t.script.OutputTokens != nil {
		out = *t.script.OutputTokens
	}
	r := t.resultEvent(false, "success", reply)
	r.StopReason = "end_turn"
	r.TerminalReason = "completed"
	r.TotalCostUSD = cost
	r.Usage = newResultUsage(in, out)
	r.NumTurns = 1 + t.toolCalls
	r.ModelUsage = map[string]any{t.model: map[string]any{
		"inputTokens": in, "outputTokens": out, "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0,
		"webSearchRequests": 0, "costUSD": cost, "contextWindow": 200000, "maxOutputTokens": 64000,
	}}
	t.out.final(r, reply)
	return 0
}

// apiError ends the turn the way the CLI reports a failed API call (no
// credentials, an API error): a synthetic assistant message with the text,
// then a result with is_error true but subtype "success"; exit 1.
func (t *turn) apiError(text, kind string) int {
	stop := "stop_sequence"
	msg := t.assistant([]contentBlock{{Type: "text", Text: text}}, stop)
	msg.Message.Model = "<synthetic>"
	msg.Message.ID = uuid.NewString()
	msg.Message.StopSequence = ""
	msg.Message.Usage.InputTokens, msg.Message.Usage.OutputTokens = 0, 0
	msg.Message.Usage.ServiceTier = nil
	msg.Message.Usage.InferenceGeo = nil
	msg.Error = kind
	msg.IsAPIErrorMessage = true
	t.out.event(msg)
	r := t.resultEvent(true, "success", text)
	r.StopReason = stop
	r.TerminalReason = "api_error"
	t.out.final(r, text)
	return 1
}

// unknownSession prints what the CLI prints for --resume of a session it
// does not have, and returns its exit status.
func (t *turn) unknownSession(id string) int {
	msg := "No conversation found with session ID: " + id
	fmt.Fprintln(os.Stderr, msg)
	t.out.final(errorResultEvent{
		Type: "result", Subtype: "error_during_execution", IsError: true, SessionID: id,
		Usage: newResultUsage(0, 0), ModelUsage: map[string]any{}, PermissionDenials: []any{},
		UUID: uuid.NewString(), Errors: []string{msg},
	}, "")
	return 1
}

// onSIGTERM makes SIGTERM end the turn as the CLI does: the request is
// marked interrupted, a final error result is printed, exit 143.
func (t *turn) onSIGTERM() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ch
		interrupted := userEvent{
			Type:      "user",
			Message:   userMessage{Role: "user", Content: []contentBlock{{Type: "text", Text: "[Request interrupted by user]"}}},
			SessionID: t.sessionID, UUID: uuid.NewString(), Timestamp: timestamp(),
		}
		r := t.resultEvent(true, "error_during_execution", "")
		r.TerminalReason = "aborted_streaming"
		r.NumTurns = 1 + t.toolCalls
		t.out.exit(143, interrupted, r, "[Request interrupted by user]")
	}()
}

// say prints an assistant message with one text block.
func (t *turn) say(text, stopReason string) {
	t.out.event(t.assistant([]contentBlock{{Type: "text", Text: text}}, stopReason))
}

// toolUse prints an assistant message calling a tool and returns the call's id.
func (t *turn) toolUse(name string, input any) string {
	id := newToolUseID()
	t.toolCalls++
	t.out.event(t.assistant([]contentBlock{{Type: "tool_use", ID: id, Name: name, Input: input}}, "tool_use"))
	return id
}

// toolResult prints the user message that returns a tool call's result.
func (t *turn) toolResult(id string, content any, isError bool, toolUseResult any) {
	t.out.event(userEvent{
		Type: "user",
		Message: userMessage{Role: "user", Content: []contentBlock{
			{ToolUseID: id, Type: "tool_result", Content: content, IsError: &isError},
		}},
		SessionID: t.sessionID, UUID: uuid.NewString(), Timestamp: timestamp(), ToolUseResult: toolUseResult,
	})
}

func (t *turn) assistant(content []contentBlock, stopReason string) assistantEvent {
	return assistantEvent{
		Type: "assistant",
		Message: assistantMessage{
			ID: "msg_01" + newToolUseID()[8:], Model: t.model, Role: "assistant",
			StopReason: stopReason, StopSequence: nil, Type: "message",
			Usage: messageUsage{
				InputTokens: 12, OutputTokens: 3, ServiceTier: "standard", InferenceGeo: "",
			},
			Content: content,
		},
		SessionID: t.sessionID, UUID: uuid.NewString(), Timestamp: timestamp(),
	}
}

func (t *turn) resultEvent(isError bool, subtype, text string) resultEvent {
	ms := time.Since(t.start).Milliseconds()
	r := resultEvent{
		DurationAPIMS: 0, SessionID: t.sessionID, Usage: newResultUsage(0, 0),
		ModelUsage: map[string]any{}, PermissionDenials: []any{},
		FastModeState: "off", FastModeDisabledReason: "sdk_opt_in_required",
		SubagentStats: json.RawMessage(subagentStats), IsError: isError, NumTurns: 1,
		Subtype: subtype, Result: text, Type: "result", DurationMS: ms, UUID: uuid.NewString(),
	}
	if !isError {
		r.DurationAPIMS = ms
	}
	if t.out.format == "stream-json" {
		r.ModelUsageSinceLastResult = map[string]any{}
	}
	return r
}

func (t *turn) initEvent() initEvent {
	keySource := "none"
	if os.Getenv("ANTHROPIC_API_KEY") != "" {
		keySource = "ANTHROPIC_API_KEY"
	}
	mode := t.o.permissionMode
	if mode == "" || mode == "manual" {
		mode = "default"
	}
	servers := []mcpServerStatus{}
	for _, name := range sortedKeys(t.servers) {
		servers = append(servers, mcpServerStatus{Name: name, Status: "connected"})
	}
	dirs := t.o.addDirs
	if dirs == nil {
		dirs = []string{}
	}
	return initEvent{
		Type: "system", Subtype: "init", Cwd: t.cwd, SessionID: t.sessionID, Tools: builtinTools,
		MCPServers: servers, Model: t.model, PermissionMode: mode, SlashCommands: slashCmds,
		TerminalSlashCommands: terminalCmds, APIKeySource: keySource, ClaudeCodeVersion: version,
		OutputStyle: "default", Agents: agents, Skills: skills, Plugins: plugins,
		Capabilities: capabilities, ServedByAnthropic: true, UUID: uuid.NewString(),
		MemoryPaths: map[string]string{"auto": filepath.Join(t.store.projectDir(t.cwd), "memory") + "/"},
		OriginalCwd: t.cwd, AdditionalDirectories: dirs,
		MessagingSocketPath: fmt.Sprintf("/tmp/claude-socks/%d.sock", os.Getpid()),
		FastModeState:       "off", FastModeDisabledReason: "sdk_opt_in_required",
		PerTurnEffortActive: true, ViewMode: "default",
	}
}

// abs makes a script's file path absolute from the cwd, as the CLI's file
// tools report paths.
func (t *turn) abs(path string) string {
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	return filepath.Join(t.cwd, path)
}

// callTool prints a tool call and runs it between its hooks: PreToolUse
// may refuse it (the tool does not run; its result is an error holding the
// reason), then PostToolUse or PostToolUseFailure follow what it did.
func (t *turn) callTool(name string, input map[string]any, run func() (content string, isError bool, toolUseResult any)) {
	id := t.toolUse(name, input)
	fields := map[string]any{"tool_name": name, "tool_input": input, "tool_use_id": id}
	if v := t.runHooks("PreToolUse", name, fields); v.blocked {
		t.toolResult(id, v.reason, true, "Error: "+v.reason)
		return
	}
	content, isError, result := run()
	post := map[string]any{"tool_name": name, "tool_input": input, "tool_use_id": id}
	if isError {
		post["error"], post["is_interrupt"] = content, false
		t.runHooks("PostToolUseFailure", name, post)
	} else {
		post["tool_response"] = result
		t.runHooks("PostToolUse", name, post)
	}
	t.toolResult(id, content, isError, result)
}

// toolError is a failed tool's result, as the CLI's tools report it.
func toolError(msg string) (string, bool, any) {
	return "<tool_use_error>" + msg + "</tool_use_error>", true, "Error: " + msg
}

// write is the Write tool: create or replace a file.
func (t *turn) write(w writeStep) {
	path := t.abs(w.FilePath)
	t.callTool("Write", map[string]any{"file_path": path, "content": w.Content}, func() (string, bool, any) {
		kind := "create"
		if exists(path) {
			kind = "update"
		}
		err := os.MkdirAll(filepath.Dir(path), 0o755)
		if err == nil {
			err = os.WriteFile(path, []byte(w.Content), 0o644)
		}
		if err != nil {
			return toolError(err.Error())
		}
		text := "File created successfully at: " + path
		if kind == "update" {
			text = fmt.Sprintf("The file %s has been updated successfully.", path)
		}
		return text, false, map[string]any{"type": kind, "filePath": path, "content": w.Content}
	})
}

// edit is the Edit tool: replace a string that occurs once (or every
// occurrence, with replace_all).
func (t *turn) edit(e editStep) {
	path := t.abs(e.FilePath)
	input := map[string]any{"file_path": path, "old_string": e.OldString, "new_string": e.NewString, "replace_all": e.ReplaceAll}
	t.callTool("Edit", input, func() (string, bool, any) {
		data, err := os.ReadFile(path)
		if err != nil {
			return toolError("File does not exist.")
		}
		n := strings.Count(string(data), e.OldString)
		switch {
		case e.OldString == "" || n == 0:
			return toolError("String to replace not found in file.\nString: " + e.OldString)
		case n > 1 && !e.ReplaceAll:
			return toolError(fmt.Sprintf("Found %d matches of the string to replace, but replace_all is false. To replace all occurrences, set replace_all to true. To replace only one occurrence, please provide more context to uniquely identify the instance.\nString: %s", n, e.OldString))
		}
		updated := strings.Replace(string(data), e.OldString, e.NewString, map[bool]int{true: -1, false: 1}[e.ReplaceAll])
		if err := os.WriteFile(path, []byte(updated), 0o644); err != nil {
			return toolError(err.Error())
		}
		return fmt.Sprintf("The file %s has been updated successfully.", path), false, map[string]any{
			"filePath": path, "oldString": e.OldString, "newString": e.NewString, "replaceAll": e.ReplaceAll,
		}
	})
}

// read is the Read tool: the file's lines, numbered as cat -n numbers them.
func (t *turn) read(r readStep) {
	path := t.abs(r.FilePath)
	t.callTool("Read", map[string]any{"file_path": path}, func() (string, bool, any) {
		data, err := os.ReadFile(path)
		if err != nil {
			return toolError("File does not exist.")
		}
		var b strings.Builder
		for i, line := range strings.SplitAfter(string(data), "\n") {
			if line == "" {
				continue
			}
			fmt.Fprintf(&b, "%6d\t%s", i+1, line)
		}
		return b.String(), false, map[string]any{"type": "text", "file": map[string]any{"filePath": path, "content": string(data)}}
	})
}

// bash is the Bash tool: the command runs through a shell (mvdan.cc/sh's
// interpreter) in the cwd; a non-zero exit is an error result.
func (t *turn) bash(command string) {
	t.callTool("Bash", map[string]any{"command": command, "description": "Run " + command}, func() (string, bool, any) {
		var stdout, stderr bytes.Buffer
		code, err := runShell(context.Background(), command, t.cwd, bytes.NewReader(nil), &stdout, &stderr, os.Environ())
		out := strings.TrimRight(stdout.String()+stderr.String(), "\n")
		if err != nil {
			out = strings.TrimSpace(out + "\n" + err.Error())
		}
		result := map[string]any{"stdout": stdout.String(), "stderr": stderr.String(), "interrupted": false, "isImage": false}
		if code != 0 {
			return fmt.Sprintf("Exit code %d\n%s", code, out), true, result
		}
		return out, false, result
	})
}

// otherTool is a call of a tool the fake does not implement: its hooks run,
// and if they let it, it "succeeds" without doing anything.
func (t *turn) otherTool(c toolStep) {
	input := c.Input
	if input == nil {
		input = map[string]any{}
	}
	t.callTool(c.Name, input, func() (string, bool, any) {
		return c.Name + " done (the fake claude does not run this tool)", false, map[string]any{}
	})
}
