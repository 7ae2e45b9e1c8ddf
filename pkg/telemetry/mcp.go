package telemetry

import (
	"context"
	"maps"
	"reflect"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The _meta keys that carry the trace context, as in W3C trace context.
const (
	MetaTraceparent = "traceparent"
	MetaTracestate  = "tracestate"
)

// metaCarrier lets a propagator read and write an MCP _meta map. Values that
// are not strings (the map is the peer's, untrusted) are ignored.
type metaCarrier map[string]any

func (c metaCarrier) Get(key string) string {
	s, _ := c[key].(string)
	return s
}

func (c metaCarrier) Set(key, value string) { c[key] = value }

func (c metaCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectMeta returns a copy of meta (which may be nil) with the trace
// context of ctx added, for a request's params._meta. The copy keeps a
// caller's map from being written while another call reads it.
func InjectMeta(ctx context.Context, meta map[string]any) map[string]any {
	out := make(map[string]any, len(meta)+2)
	maps.Copy(out, meta)
	otel.GetTextMapPropagator().Inject(ctx, metaCarrier(out))
	return out
}

// ExtractMeta returns ctx with the remote span context found in meta, if it
// holds a valid one; else ctx unchanged.
func ExtractMeta(ctx context.Context, meta map[string]any) context.Context {
	if meta == nil {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, metaCarrier(meta))
}

// ClientMiddleware is a sending middleware for an mcp.Client
// (client.AddSendingMiddleware): each request the client sends gets a
// client span named "{method} {target}" (for tools/call the target is the
// tool, e.g. "tools/call mesh_execute"), and the request's params._meta
// gets that span's trace context. Notifications pass untouched.
func ClientMiddleware() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			params := paramsOf(req)
			if strings.HasPrefix(method, "notifications/") || params == nil {
				return next(ctx, method, req)
			}
			name, attrs := requestSpan(method, req, params)
			ctx, span := Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
			defer span.End()
			params.SetMeta(InjectMeta(ctx, params.GetMeta()))
			res, err := next(ctx, method, req)
			endRequestSpan(span, res, err)
			return res, err
		}
	}
}

// ServerMiddleware is a receiving middleware for an mcp.Server
// (server.AddReceivingMiddleware): each request gets a server span named as
// in ClientMiddleware, whose parent is the trace context in params._meta
// when the client sent one, else the span already in ctx (such as the
// HTTP request's). Notifications pass untouched.
func ServerMiddleware() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasPrefix(method, "notifications/") {
				return next(ctx, method, req)
			}
			params := paramsOf(req)
			if params != nil {
				ctx = ExtractMeta(ctx, params.GetMeta())
			}
			name, attrs := requestSpan(method, req, params)
			ctx, span := Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
			defer span.End()
			res, err := next(ctx, method, req)
			endRequestSpan(span, res, err)
			return res, err
		}
	}
}

// paramsOf returns the request's params, or nil when there are none. A
// request without params (a ping, say) holds a typed nil pointer, whose
// GetMeta would panic: any client could crash the server with it.
func paramsOf(req mcp.Request) mcp.Params {
	p := req.GetParams()
	if p == nil {
		return nil
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return p
}

// maxToolName bounds a tool name in span names and attributes.
const maxToolName = 64

// requestSpan names the span of req, whose params (paramsOf) are given.
func requestSpan(method string, req mcp.Request, params mcp.Params) (string, []attribute.KeyValue) {
	method = Truncate(method, maxToolName)
	attrs := []attribute.KeyValue{AttrMCPMethodName.String(method)}
	if s := req.GetSession(); s != nil {
		if id := s.ID(); id != "" {
			attrs = append(attrs, AttrMCPSessionID.String(id))
		}
	}
	var tool string
	switch p := params.(type) {
	case *mcp.CallToolParams:
		tool = p.Name
	case *mcp.CallToolParamsRaw:
		tool = p.Name
	}
	if tool == "" {
		return method, attrs
	}
	// The name is the client's: a server span exists before the server
	// knows whether it has that tool.
	tool = Truncate(tool, maxToolName)
	attrs = append(attrs, AttrOperationName.String(OperationExecuteTool), AttrToolName.String(tool))
	return method + " " + tool, attrs
}

func endRequestSpan(span trace.Span, res mcp.Result, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(AttrErrorType.String("mcp_error"))
		return
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		span.SetStatus(codes.Error, "tool error")
		span.SetAttributes(AttrErrorType.String("tool_error"))
	}
}
