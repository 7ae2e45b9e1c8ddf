package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// emitter prints a run's output in the chosen --output-format: every event
// for stream-json, the final result object for json, the final text for
// text. It is safe to use from the SIGTERM handler while a step runs.
type emitter struct {
	mu     sync.Mutex
	format string
}

// event prints an intermediate event (stream-json only).
func (e *emitter) event(v any) {
	if e.format == "stream-json" {
		e.write(render(v))
	}
}

// raw prints a JSON object as one line (stream-json only).
func (e *emitter) raw(msg json.RawMessage) {
	if e.format != "stream-json" {
		return
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, msg); err != nil {
		return
	}
	buf.WriteByte('\n')
	e.write(buf.Bytes())
}

// final prints the result: the event itself, or for text its text.
func (e *emitter) final(v any, text string) {
	e.write(e.renderFinal(v, text))
}

func (e *emitter) renderFinal(v any, text string) []byte {
	if e.format == "text" {
		return []byte(text + "\n")
	}
	return render(v)
}

// exit prints the last event and the result, and exits with code while
// holding the lock, so nothing else is printed after them.
func (e *emitter) exit(code int, last any, result any, text string) {
	var out []byte
	if e.format == "stream-json" && last != nil {
		out = append(out, render(last)...)
	}
	out = append(out, e.renderFinal(result, text)...)
	e.mu.Lock()
	_, _ = os.Stdout.Write(out)
	os.Exit(code)
}

func (e *emitter) write(b []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = os.Stdout.Write(b)
}

// render returns v as one JSON line, without the HTML escaping of
// encoding/json (the CLI prints "<synthetic>", not "\u003csynthetic\u003e").
func render(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "fake claude: encoding an event:", err)
		return nil
	}
	return buf.Bytes()
}
