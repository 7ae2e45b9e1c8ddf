package meshapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/textcut"
)

// Code names a kind of failure, stable for clients to branch on. A tool
// error carries it in its structured content ({"error": {"code",
// "message"}}); the message is for people and may change.
type Code string

// The error codes.
const (
	// CodeInvalidArgument: the request is wrong; the message says how.
	CodeInvalidArgument Code = "invalid_argument"
	// CodeNotFound: no such thing for this caller (another caller's
	// journey or run is "not found" too).
	CodeNotFound Code = "not_found"
	// CodeConflict: the thing is not in a state that allows the request.
	CodeConflict Code = "conflict"
	// CodeNotLive: a journey's worker is not running (stopped or orphaned);
	// spawn_worker with mode resume restarts it with its workspace. The
	// action did not run.
	CodeNotLive Code = "not_live"
	// CodeUnavailable: a dependency failed or is overloaded; the request
	// may pass if tried again. An action whose worker stopped while it ran
	// is answered so too: it may have partly run, and its journey is
	// orphaned (resume it first).
	CodeUnavailable Code = "unavailable"
	// CodePermissionDenied: outside what the operator allows.
	CodePermissionDenied Code = "permission_denied"
	// CodeResourceExhausted: a quota or limit is used up.
	CodeResourceExhausted Code = "resource_exhausted"
	// CodePipelineChanged: the pipeline's definition changed since the run
	// started, so it cannot be resumed or forked as it was.
	CodePipelineChanged Code = "pipeline_changed"
	// CodeUnauthenticated: the request has no caller.
	CodeUnauthenticated Code = "unauthenticated"
	// CodeWorkerFailed: the worker ran the action and it failed (a file
	// that does not exist, say); the message is the worker's.
	CodeWorkerFailed Code = "worker_error"
	// CodeAgentFailed: the agent ran and reported a failure; the message
	// is its output.
	CodeAgentFailed Code = "agent_error"
	// CodeInternal: the server failed; it logged the details.
	CodeInternal Code = "internal"
)

// Codes lists every code, in the order docs/mcp.md lists them.
var Codes = []Code{
	CodeInvalidArgument, CodeNotFound, CodeConflict, CodeNotLive, CodeUnavailable, CodePermissionDenied,
	CodeResourceExhausted, CodePipelineChanged, CodeUnauthenticated, CodeWorkerFailed, CodeAgentFailed, CodeInternal,
}

// Error is a failure reported to a client as is: its message says what was
// wrong and what to do, its code lets a program decide.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err's *Error, if it holds one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// errorContent is a tool error's structured content.
type errorContent struct {
	Error *Error `json:"error"`
}

// MaxMessageBytes bounds an error's message as a client gets it: a message
// may quote what the client sent, and must not send a megabyte back for a
// megabyte of bad input (twice: as text and structured content).
const MaxMessageBytes = 4096

// Clipped is e with its message valid UTF-8 and at most MaxMessageBytes.
func (e *Error) Clipped() *Error {
	if len(e.Message) <= MaxMessageBytes && utf8.ValidString(e.Message) {
		return e
	}
	return &Error{Code: e.Code, Message: textcut.Valid(e.Message, MaxMessageBytes) + " …"}
}

// ErrorResult is the tool result that reports e: isError, the message as
// text, and the code in the structured content.
func ErrorResult(e *Error) *mcp.CallToolResult {
	e = e.Clipped()
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: e.Message}},
		StructuredContent: errorContent{Error: e},
	}
}

// ErrorMiddleware is a server's receiving middleware that gives the error
// result of a tool, when its handler returned an *Error (the SDK turns it
// into text alone), the error's code in the structured content. Arguments
// the SDK refused against the tool's input schema, before any handler ran,
// are reported as invalid_argument the same way. Results that already carry
// structured content are left as they are.
func ErrorMiddleware() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if tr, ok := res.(*mcp.CallToolResult); ok && err == nil && tr.IsError && tr.StructuredContent == nil {
				e, ok := AsError(tr.GetError())
				if !ok && tr.GetError() != nil {
					e, ok = schemaRefusal(tr.GetError().Error())
				}
				if ok {
					e = e.Clipped()
					tr.StructuredContent = errorContent{Error: e}
					tr.Content = []mcp.Content{&mcp.TextContent{Text: e.Message}}
				}
			}
			return res, err
		}
	}
}

// schemaRefusal reads the SDK's refusal of a call's arguments (the error it
// set on the result, which starts "validating "arguments": validating
// root: ") as an invalid_argument error, said without the validator's
// framing: "journey_id: type: 42 has type "integer", want "string"". So is
// its failure to decode arguments the schema let through (a number out of
// the field's range): "tail: cannot take number 1e300".
func schemaRefusal(text string) (*Error, bool) {
	if m := unmarshalError.FindStringSubmatch(text); m != nil {
		// "meshapi.in.tail": the Go types' names before the field's.
		field := m[2][strings.LastIndexByte(m[2], '.')+1:]
		if field == "" {
			field = "the arguments"
		}
		value := strings.TrimSuffix(strings.TrimPrefix(strings.Trim(m[1], `"`), "number "), " overflows")
		return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("the arguments do not fit the tool's input: %s: cannot take %s", field, value)}, true
	}
	rest, ok := strings.CutPrefix(text, `validating "arguments": `)
	if !ok {
		return nil, false
	}
	rest = strings.TrimPrefix(strings.TrimPrefix(rest, "validating root: "), "validating /properties/")
	return &Error{Code: CodeInvalidArgument, Message: "the arguments do not match the tool's input schema: " + rest}, true
}

// unmarshalError is encoding/json's refusal of a value for a Go field.
var unmarshalError = regexp.MustCompile(`^json: cannot unmarshal (.+?) into Go (?:struct field (.+)|value) of type \S+$`)

// ErrorOf returns the error a tool result reports, for clients: its code
// and message from the structured content when the server sent one, else
// the text with no code. ok is false when res is not an error.
func ErrorOf(res *mcp.CallToolResult) (_ *Error, ok bool) {
	if res == nil || !res.IsError {
		return nil, false
	}
	e := &Error{Message: ResultText(res)}
	if res.StructuredContent != nil {
		var c errorContent
		if b, err := json.Marshal(res.StructuredContent); err == nil && json.Unmarshal(b, &c) == nil && c.Error != nil {
			e.Code = c.Error.Code
			if c.Error.Message != "" {
				e.Message = c.Error.Message
			}
		}
	}
	return e, true
}

// ResultText joins a result's text content.
func ResultText(res *mcp.CallToolResult) string {
	var s string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			if s != "" {
				s += "\n"
			}
			s += t.Text
		}
	}
	return s
}

// Refusable is a tool's output that may report a refusal of its own (the
// result gate's): the call is then an error result that still carries the
// output, with its reasons, as structured content.
type Refusable interface{ IsRefused() bool }

// Tool adapts op, a service's operation on behalf of a caller, into an MCP
// tool handler, the same way in every service: the caller comes from the
// request (else the call fails as unauthenticated); a panic in op fails the
// call rather than the server; op's error goes through fail, the service's
// translation into the Error the client sees (with its code); and a
// Refusable output that was refused is an error result.
func Tool[In, Out any](name string, caller CallerFunc, fail func(ctx context.Context, tool string, err error) error,
	op func(ctx context.Context, caller string, in In) (Out, error),
) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (_ *mcp.CallToolResult, out Out, err error) {
		defer func() {
			if p := recover(); p != nil {
				var zero Out
				out, err = zero, fail(ctx, name, fmt.Errorf("panic: %v", p))
			}
		}()
		who, err := caller(req)
		if err != nil {
			return nil, out, &Error{Code: CodeUnauthenticated, Message: err.Error()}
		}
		if out, err = op(ctx, who, in); err != nil {
			return nil, out, fail(ctx, name, err)
		}
		if r, ok := any(out).(Refusable); ok && r.IsRefused() {
			return &mcp.CallToolResult{IsError: true}, out, nil
		}
		return nil, out, nil
	}
}

// HTTPStatus is the HTTP status of a failure with code, for what answers
// over HTTP (the orchestrator's API and console): the status a client of
// that kind of request expects, 500 for a code it does not name.
func HTTPStatus(code Code) int {
	switch code {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict, CodePipelineChanged, CodeNotLive:
		return http.StatusConflict
	case CodeResourceExhausted:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
