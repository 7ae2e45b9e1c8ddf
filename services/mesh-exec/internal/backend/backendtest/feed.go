package backendtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Feed gives every line of data to p, as the runner does, and returns the
// events it produced.
func Feed(p backend.Parser, data []byte) []backend.Event {
	var events []backend.Event
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		events = append(events, p.Line(line)...)
	}
	return events
}

// FeedFile feeds the file testdata/name of the calling package to p.
func FeedFile(tb testing.TB, p backend.Parser, name string) []backend.Event {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return Feed(p, data)
}

// Kinds lists the kinds of events, for comparing sequences.
func Kinds(events []backend.Event) []backend.Kind {
	out := make([]backend.Kind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}
