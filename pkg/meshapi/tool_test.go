package meshapi

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type refusal struct{ Refused bool }

func (r refusal) IsRefused() bool { return r.Refused }

// The adapter every service's tools go through: the caller from the
// token, the service's error translation, a panic kept from the server,
// and a refused output as an error result that keeps the output.
func TestTool(t *testing.T) {
	t.Parallel()
	var failed []string
	fail := func(_ context.Context, tool string, err error) error {
		failed = append(failed, tool+": "+err.Error())
		return Errorf(CodeInternal, "internal error")
	}
	withToken := &mcp.CallToolRequest{Extra: &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: "alice"}}}
	ctx := context.Background()

	h := Tool("echo", TokenCaller, fail, func(_ context.Context, caller string, in string) (string, error) {
		switch in {
		case "panic":
			panic("boom")
		case "fail":
			return "", errors.New("disk full")
		}
		return caller + ": " + in, nil
	})
	if res, out, err := h(ctx, withToken, "hi"); err != nil || res != nil || out != "alice: hi" {
		t.Errorf("a call = %v, %q, %v", res, out, err)
	}
	if _, _, err := h(ctx, &mcp.CallToolRequest{}, "hi"); err == nil {
		t.Error("a call without a token was let through")
	} else if e, ok := AsError(err); !ok || e.Code != CodeUnauthenticated {
		t.Errorf("without a token: %v", err)
	}
	if _, _, err := h(ctx, withToken, "fail"); err == nil || err.Error() != "internal error" {
		t.Errorf("a failing op: %v", err)
	}
	if _, out, err := h(ctx, withToken, "panic"); err == nil || out != "" {
		t.Errorf("a panicking op: %q, %v", out, err)
	}
	if len(failed) != 2 || failed[0] != "echo: disk full" || failed[1] != "echo: panic: boom" {
		t.Errorf("the service was told %q", failed)
	}
	if _, _, err := Tool("x", FixedCaller("local"), fail, func(_ context.Context, caller string, _ int) (int, error) {
		if caller != "local" {
			return 0, errors.New("caller " + caller)
		}
		return 1, nil
	})(ctx, &mcp.CallToolRequest{}, 0); err != nil {
		t.Errorf("a fixed caller: %v", err)
	}

	refused := Tool("gate", TokenCaller, fail, func(_ context.Context, _ string, in bool) (refusal, error) { return refusal{Refused: in}, nil })
	if res, out, err := refused(ctx, withToken, true); err != nil || res == nil || !res.IsError || !out.Refused {
		t.Errorf("a refused output: %+v, %+v, %v", res, out, err)
	}
	if res, _, err := refused(ctx, withToken, false); err != nil || res != nil {
		t.Errorf("an output not refused: %+v, %v", res, err)
	}
}

// Each code a client may get over HTTP has the status such a client
// expects; a code HTTP does not name is a server failure.
func TestHTTPStatus(t *testing.T) {
	for code, want := range map[Code]int{
		CodeInvalidArgument: 400, CodeUnauthenticated: 401, CodePermissionDenied: 403,
		CodeNotFound: 404, CodeConflict: 409, CodePipelineChanged: 409, CodeNotLive: 409,
		CodeResourceExhausted: 429, CodeUnavailable: 503, CodeInternal: 500, CodeWorkerFailed: 500,
	} {
		if got := HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", code, got, want)
		}
	}
}

// Arguments the SDK refuses against the input schema, before any handler
// runs, reach the client as invalid_argument in the structured content,
// as a handler's own errors do.
func TestErrorMiddlewareCodesSchemaRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "v"}, nil)
	srv.AddReceivingMiddleware(ErrorMiddleware())
	type in struct {
		JourneyID string `json:"journey_id"`
		Tail      int    `json:"tail,omitempty"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "get"}, func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, struct{}, error) {
		return nil, struct{}{}, Errorf(CodeNotFound, "no journey %q", a.JourneyID)
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "v"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, tc := range []struct {
		name string
		args map[string]any
		code Code
		says string
	}{
		{"a number for a string", map[string]any{"journey_id": 42}, CodeInvalidArgument, `journey_id: type: 42 has type "integer", want "string"`},
		{"a required field missing", map[string]any{}, CodeInvalidArgument, "journey_id"},
		{"the handler's own error", map[string]any{"journey_id": "j"}, CodeNotFound, `no journey "j"`},
		{"a number out of the field's range", map[string]any{"journey_id": "j", "tail": 1e300}, CodeInvalidArgument, "tail: cannot take 1e+300"},
		{"a long message, clipped", map[string]any{"journey_id": strings.Repeat("j", 1<<20)}, CodeNotFound, `no journey "jjj`},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get", Arguments: tc.args})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		e, ok := ErrorOf(res)
		if !ok || e.Code != tc.code || !strings.Contains(e.Message, tc.says) || ResultText(res) != e.Message || len(e.Message) > MaxMessageBytes+8 {
			t.Errorf("%s: %.200q (text %.200q), want %s saying %q, at most %d bytes", tc.name, e.Message, ResultText(res), tc.code, tc.says, MaxMessageBytes)
		}
	}
}
