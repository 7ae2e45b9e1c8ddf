package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
)

// The API's JSON errors carry meshapi's codes, the ones its MCP tools send,
// so a client branches on one set; these two are the HTTP API's own.
const (
	codeMethodNotAllowed meshapi.Code = "method_not_allowed"
	codeTooLarge         meshapi.Code = "too_large"
)

// internalMessage is all a client learns of an unexpected failure; the
// error itself is logged.
const internalMessage = "internal error; the orchestrator logged it"

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = api.MaxRequestBytes

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    meshapi.Code `json:"code"`
	Message string       `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code meshapi.Code, msg string) {
	e := (&meshapi.Error{Code: code, Message: msg}).Clipped()
	writeJSON(w, status, errorBody{Error: errorDetail{Code: e.Code, Message: e.Message}})
}

// classify maps an engine error to a status and code; ok is false for an
// unexpected error, whose message is not for clients.
func classify(err error) (status int, code meshapi.Code, ok bool) {
	code = engine.ErrorCode(err)
	return meshapi.HTTPStatus(code), code, code != meshapi.CodeInternal
}

// fail writes err as a JSON error; unexpected errors are logged and
// reported plainly.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, ok := classify(err)
	msg := err.Error()
	if !ok {
		a.logger.ErrorContext(r.Context(), "request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		msg = internalMessage
	}
	writeError(w, status, code, msg)
}

// invalidf writes a 400.
func invalidf(w http.ResponseWriter, format string, args ...any) {
	writeError(w, http.StatusBadRequest, meshapi.CodeInvalidArgument, fmt.Sprintf(format, args...))
}

// decodeBody decodes the request's JSON body into v strictly: one value, no
// unknown fields, at most MaxBodyBytes. An empty body is an error unless
// optional, when v keeps its zero value. It writes the error response and
// returns false on failure.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the request body is larger than %d bytes", MaxBodyBytes))
		} else {
			invalidf(w, "reading the request body: %v", err)
		}
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return true
		}
		invalidf(w, "the request body is empty; send a JSON object")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		invalidf(w, "the request body is not valid: %s", jsonProblem(err, body))
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		invalidf(w, "the request body must hold one JSON object, and nothing after it")
		return false
	}
	return true
}

// jsonProblem says what is wrong with a body, and where.
func jsonProblem(err error, body []byte) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		line, col := position(body, syntax.Offset)
		return fmt.Sprintf("malformed JSON at line %d, column %d: %v", line, col, syntax)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Sprintf("want a JSON object, not %s", typ.Value)
		}
		return fmt.Sprintf("field %s must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ") + " (see /v1/openapi.json)"
	}
	return err.Error()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "string":
		return "a string"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	}
	return goKind
}

// position turns a byte offset into a line and column, from 1.
func position(body []byte, offset int64) (line, col int) {
	offset = min(max(offset, 0), int64(len(body)))
	before := body[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, max(col, 1)
}
