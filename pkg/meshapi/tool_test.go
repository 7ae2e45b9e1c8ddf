package meshapi

import (
	"context"
	"errors"
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
