package apiclient

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// readEvents reads the events of a stream from r until the first error,
// which it returns: io.EOF at the end of the stream.
func readEvents(r io.Reader) ([]sseEvent, error) {
	sr := newSSEReader(r)
	var out []sseEvent
	for {
		ev, err := sr.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestSSEReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream string
		want   []sseEvent
	}{
		{"one", "event: run\ndata: {}\n\n", []sseEvent{{Name: "run", Data: "{}"}}},
		{"multi-line data", "event: checkpoint\ndata: {\ndata:   \"a\": 1\ndata: }\n\n", []sseEvent{{Name: "checkpoint", Data: "{\n  \"a\": 1\n}"}}},
		{"comments and heartbeats", ": connected\n\n: ping\nevent: x\n: ping\ndata: 1\n\n: ping\n\n", []sseEvent{{Name: "x", Data: "1"}}},
		{"CRLF and CR", "event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\r", []sseEvent{{Name: "a", Data: "1"}, {Name: "b", Data: "2"}}},
		{"no space, no name", "data:x\n\n", []sseEvent{{Name: "message", Data: "x"}}},
		{"only one space is dropped", "data:  x \n\n", []sseEvent{{Name: "message", Data: " x "}}},
		{"empty data line", "data\ndata\n\n", []sseEvent{{Name: "message", Data: "\n"}}},
		{"no data is no event", "event: x\n\ndata: 2\n\n", []sseEvent{{Name: "message", Data: "2"}}},
		{"id and retry", "id: 7\nretry: 10\ndata: a\n\ndata: b\n\n", []sseEvent{{Name: "message", Data: "a", ID: "7"}, {Name: "message", Data: "b", ID: "7"}}},
		{"cut event is dropped", "data: 1\n\nevent: x\ndata: {\"type\":", []sseEvent{{Name: "message", Data: "1"}}},
		{"cut after data line", "data: 1\n\ndata: 2\n", []sseEvent{{Name: "message", Data: "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readEvents(strings.NewReader(tt.stream))
			if !errors.Is(err, io.EOF) {
				t.Fatalf("err = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
			// Byte by byte, a CR at the end of a read must wait for an LF.
			slow, _ := readEvents(iotest.OneByteReader(strings.NewReader(tt.stream)))
			if !reflect.DeepEqual(slow, tt.want) {
				t.Errorf("byte by byte: got %q\nwant %q", slow, tt.want)
			}
		})
	}
}

func TestSSEReaderError(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	r := newSSEReader(io.MultiReader(strings.NewReader("data: 1\n\ndata: 2\n"), iotest.ErrReader(boom)))
	if ev, err := r.Next(); err != nil || ev.Data != "1" {
		t.Fatalf("Next = %q, %v", ev, err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the read error", err)
	}
}

// An event's data lines add up to at most maxEventBytes: a stream of
// lines each under the bound, with no blank line to end the event, is an
// error once they pass it, not a buffer that grows until memory ends.
func TestSSEReaderBoundsAnEvent(t *testing.T) {
	t.Parallel()
	line := "data: " + strings.Repeat("x", 1<<20) + "\n"
	lines := maxEventBytes>>20 + 2
	r := newSSEReader(strings.NewReader(strings.Repeat(line, lines) + "\n"))
	if ev, err := r.Next(); err == nil || !strings.Contains(err.Error(), "passes") {
		t.Fatalf("Next = %d bytes of data, %v; want an error", len(ev.Data), err)
	}
}

// FuzzSSEReader checks that no stream makes the reader panic or loop, and
// that reading in one piece or byte by byte gives the same events.
func FuzzSSEReader(f *testing.F) {
	f.Add("event: run\ndata: {}\n\n")
	f.Add(": ping\r\ndata:a\rdata\n\n\n")
	f.Add("id: \x00\ndata: x\r")
	f.Fuzz(func(t *testing.T, stream string) {
		whole, _ := readEvents(strings.NewReader(stream))
		slow, _ := readEvents(iotest.OneByteReader(strings.NewReader(stream)))
		if !reflect.DeepEqual(whole, slow) {
			t.Errorf("whole %q\nbyte by byte %q", whole, slow)
		}
		for _, ev := range whole {
			if strings.ContainsAny(ev.Name, "\r\n") {
				t.Errorf("name %q has a line break", ev.Name)
			}
		}
	})
}
