// Package apiclient is a typed client for the orchestrator's HTTP API under
// /v1: pipelines, runs, checkpoints, forks, approvals, cancellation, pruning,
// and the server-sent events of a run.
//
// It speaks the wire shapes the server encodes (api.Run, api.RunView,
// api.Checkpoint, api.Event) rather than copies of them, so that a
// change of shape breaks the build of the client, not its users. Requests
// that only exist on the wire (fork, resume, prune bodies) have their own
// types here.
//
// Every failure the server reports comes back as an [*Error] holding its
// status, code and message.
package apiclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// maxBody bounds the JSON answers the client reads.
const maxBody = 64 << 20

// Client calls one orchestrator. It is safe for concurrent use; set its
// fields before the first call.
type Client struct {
	// Reconnects is how many times in a row [Client.Events] reconnects a
	// dropped stream that delivered nothing new before it gives up. New
	// sets 5.
	Reconnects int
	// ReconnectDelay is the wait before the first reconnection of a
	// dropped stream; it doubles with each further one in a row, up to 10
	// s. New sets 500 ms.
	ReconnectDelay time.Duration

	base  string
	token string
	hc    *http.Client
}

// New returns a client of the orchestrator at baseURL (such as
// http://127.0.0.1:8090) that sends token, when not empty, as a bearer
// token. A nil httpClient means http.DefaultClient; whatever it is, it must
// not have a Timeout, which would cut event streams: bound calls with their
// context instead.
func New(baseURL, token string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{
		Reconnects:     5,
		ReconnectDelay: 500 * time.Millisecond,
		base:           strings.TrimRight(baseURL, "/"),
		token:          token,
		hc:             httpClient,
	}
}

// Error is a failure the server reported: an HTTP status of 400 or more,
// with the body {"error":{"code":"...","message":"..."}} when the server
// wrote one.
type Error struct {
	// Status is the HTTP status code; 0 for a failure reported inside an
	// event stream.
	Status int
	// Code is the server's machine-readable code ("not_found", ...); empty
	// when the body was not the API's error shape.
	Code string
	// Message is the server's message, or a description of the answer
	// when the body was not the API's error shape.
	Message string
}

// Error returns the server's message as is, which is written for people.
func (e *Error) Error() string {
	switch {
	case e.Message != "":
		return e.Message
	case e.Code != "" && e.Status == 0:
		return e.Code
	case e.Code != "":
		return fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
	default:
		return fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	}
}

// errorBody is the API's error shape.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// readError turns an answer with an error status into an *Error.
func readError(resp *http.Response) *Error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &Error{Status: resp.StatusCode}
	var body errorBody
	if json.Unmarshal(raw, &body) == nil && (body.Error.Message != "" || body.Error.Code != "") {
		e.Code, e.Message = body.Error.Code, body.Error.Message
		return e
	}
	// Not the API's shape: a proxy, a load balancer, a wrong address.
	snippet := strings.Join(strings.Fields(string(raw)), " ")
	if len(snippet) > 200 {
		snippet = snippet[:200] + "…"
	}
	e.Message = fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	if snippet != "" {
		e.Message += ": " + snippet
	}
	return e
}

// Pipeline is one pipeline of GET /v1/pipelines.
type Pipeline = api.PipelineSummary

// Pipelines lists the pipelines a run can be started of.
func (c *Client) Pipelines(ctx context.Context) ([]Pipeline, error) {
	var out api.PipelineList
	err := c.do(ctx, http.MethodGet, "/v1/pipelines", nil, nil, &out)
	return out.Pipelines, err
}

// StartRun starts a run of a pipeline and returns it.
func (c *Client) StartRun(ctx context.Context, req api.StartRequest) (api.Run, error) {
	var run api.Run
	err := c.do(ctx, http.MethodPost, "/v1/runs", nil, req, &run)
	return run, err
}

// RunFilter selects runs for [Client.ListRuns]. Empty fields match any run.
type RunFilter struct {
	Pipeline string
	Status   string
	Thread   string
	// Limit bounds how many runs come back; 0 leaves it to the server
	// (50).
	Limit int
	// Before pages: only runs created before the run with this id.
	Before string
}

// ListRuns lists runs, newest first.
func (c *Client) ListRuns(ctx context.Context, f RunFilter) ([]api.Run, error) {
	q := url.Values{}
	for k, v := range map[string]string{"pipeline": f.Pipeline, "status": f.Status, "thread": f.Thread, "before": f.Before} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out api.RunList
	err := c.do(ctx, http.MethodGet, "/v1/runs", q, nil, &out)
	return out.Runs, err
}

// GetRun returns a run with its state at its head: inputs, nodes, outputs,
// role sessions, interrupts and attempts.
func (c *Client) GetRun(ctx context.Context, runID string) (api.RunView, error) {
	var v api.RunView
	err := c.do(ctx, http.MethodGet, runPath(runID, ""), nil, nil, &v)
	return v, err
}

// Checkpoints lists a run's checkpoints in order.
func (c *Client) Checkpoints(ctx context.Context, runID string) ([]api.Checkpoint, error) {
	var out api.CheckpointList
	err := c.do(ctx, http.MethodGet, runPath(runID, "/checkpoints"), nil, nil, &out)
	return out.Checkpoints, err
}

// Workspace is what ExportWorkspace took out, beside the content it wrote.
type Workspace struct {
	// Journey is the marketplace journey whose workspace it is; Commit,
	// for a bundle, the commit it holds as refs/heads/meshwork.
	Journey, Commit string
	// Bytes were written; SHA256 is their hex digest, checked against the
	// server's Repr-Digest.
	Bytes  int64
	SHA256 string
}

// ExportWorkspace writes the workspace that holds a node's change to w, as
// a git bundle (format "bundle", "" too) or a tar ("tar"). An error past
// the first byte written (a cut connection, a digest that does not match)
// means what w holds is not the workspace: the caller discards it.
func (c *Client) ExportWorkspace(ctx context.Context, runID, node, format string, w io.Writer) (Workspace, error) {
	var q url.Values
	if format != "" {
		q = url.Values{"format": {format}}
	}
	path := runPath(runID, "/nodes/"+url.PathEscape(node)+"/workspace")
	req, err := c.newRequest(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return Workspace{}, err
	}
	resp, err := c.send(req)
	if err != nil {
		return Workspace{}, err
	}
	defer resp.Body.Close()
	want, ok := api.ReprDigestSHA256(resp.Header.Get("Repr-Digest"))
	if !ok {
		return Workspace{}, fmt.Errorf("GET %s: no SHA-256 Repr-Digest in the answer (%q)", path, resp.Header.Get("Repr-Digest"))
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return Workspace{}, fmt.Errorf("GET %s: reading the workspace: %w", path, err)
	}
	if n > maxBody {
		return Workspace{}, fmt.Errorf("GET %s: the workspace passes %d bytes", path, maxBody)
	}
	sum := h.Sum(nil)
	if !bytes.Equal(sum, want) {
		return Workspace{}, fmt.Errorf("GET %s: the %d bytes read do not have the SHA-256 the server sent (cut short?)", path, n)
	}
	return Workspace{Journey: resp.Header.Get("Meshwork-Journey"), Commit: resp.Header.Get("Meshwork-Commit"), Bytes: n, SHA256: hex.EncodeToString(sum)}, nil
}

// ForkRequest forks a run from one of its checkpoints.
type ForkRequest struct {
	// Seq names the checkpoint of the run to start from.
	Seq int `json:"seq"`
	// Patch changes the state before the fork runs: inputs, and node
	// states (a node set to pending runs again).
	Patch *api.State `json:"patch,omitempty"`
	// Thread is the fork's thread; empty starts a new one.
	Thread string `json:"thread,omitempty"`
	// Migrate runs the fork under the pipeline's current definition when
	// it changed since the run started.
	Migrate bool `json:"migrate,omitempty"`
}

// Fork starts a new run from a checkpoint of runID and returns the new run.
func (c *Client) Fork(ctx context.Context, runID string, req ForkRequest) (api.Run, error) {
	var run api.Run
	err := c.do(ctx, http.MethodPost, runPath(runID, "/fork"), nil, req, &run)
	return run, err
}

// Cancel cancels a run and returns it.
func (c *Client) Cancel(ctx context.Context, runID string) (api.Run, error) {
	var run api.Run
	err := c.do(ctx, http.MethodPost, runPath(runID, "/cancel"), nil, struct{}{}, &run)
	return run, err
}

// ResumeRun resumes a failed run: its failed nodes run again. With migrate
// it continues under the pipeline's current definition.
func (c *Client) ResumeRun(ctx context.Context, runID string, migrate bool) (api.Run, error) {
	body := struct {
		Migrate bool `json:"migrate,omitempty"`
	}{migrate}
	var run api.Run
	err := c.do(ctx, http.MethodPost, runPath(runID, "/resume"), nil, body, &run)
	return run, err
}

// ResumeInterrupt resumes an interrupt (an approval node waiting) with a
// value, any JSON, and returns its run.
func (c *Client) ResumeInterrupt(ctx context.Context, interruptID string, value json.RawMessage, migrate bool) (api.Run, error) {
	body := struct {
		Value   json.RawMessage `json:"value"`
		Migrate bool            `json:"migrate,omitempty"`
	}{value, migrate}
	var run api.Run
	err := c.do(ctx, http.MethodPost, "/v1/interrupts/"+url.PathEscape(interruptID)+"/resume", nil, body, &run)
	return run, err
}

// Prune keeps a run's last keep checkpoints, deletes the older ones, and
// returns how many it deleted.
func (c *Client) Prune(ctx context.Context, runID string, keep int) (int64, error) {
	body := struct {
		Keep int `json:"keep"`
	}{keep}
	var out api.PruneResult
	err := c.do(ctx, http.MethodPost, runPath(runID, "/prune"), nil, body, &out)
	return out.Deleted, err
}

func runPath(runID, suffix string) string {
	return "/v1/runs/" + url.PathEscape(runID) + suffix
}

// newRequest builds a request of the API, with body (if not nil) as JSON.
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request to %s %s: %w", method, path, err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send sends a request and returns the answer if its status is 2xx.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the method and URL in quotes
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

// do calls the API and decodes its JSON answer into out.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(out); err != nil {
		return fmt.Errorf("decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}
