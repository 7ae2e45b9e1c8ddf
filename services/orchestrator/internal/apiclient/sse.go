package apiclient

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// maxEventBytes bounds one event of a stream, its lines each and its data
// fields together; a checkpoint event holds node outputs, which can be
// long.
const maxEventBytes = 64 << 20

// sseEvent is one event of a text/event-stream.
type sseEvent struct {
	// Name is the event field; "message" when the event has none.
	Name string
	// Data is the data fields joined by newlines.
	Data string
	// ID is the last id field seen, as the spec keeps it across events.
	ID string
}

// sseReader reads a text/event-stream as the WHATWG HTML spec describes it
// (§9.2.6): events end with a blank line; lines starting with a colon are
// comments (heartbeats); a field's value loses one leading space; data
// fields add up line by line; lines end with LF, CRLF or CR.
type sseReader struct {
	sc     *bufio.Scanner
	lastID string
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	sc.Split(scanSSELines)
	return &sseReader{sc: sc}
}

// Next returns the next complete event. At the end of the stream it returns
// io.EOF, or the error that ended the stream; an event the stream ended in
// the middle of is dropped, as the spec says, since its data may be cut.
func (r *sseReader) Next() (sseEvent, error) {
	var name string
	var data strings.Builder
	hasData := false
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if !hasData {
				name = "" // an event without data is not dispatched
				continue
			}
			if name == "" {
				name = "message"
			}
			return sseEvent{Name: name, Data: data.String(), ID: r.lastID}, nil
		}
		if line[0] == ':' {
			continue // a comment, such as a heartbeat
		}
		field, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch field {
		case "event":
			name = value
		case "data":
			if data.Len()+len(value)+1 > maxEventBytes {
				return sseEvent{}, fmt.Errorf("an event of the stream passes %d bytes", maxEventBytes)
			}
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				r.lastID = value
			}
		}
		// retry and unknown fields are ignored.
	}
	if err := r.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}

// scanSSELines splits lines ending with LF, CRLF or CR. A lone CR at the end
// of the buffer waits for more input, since an LF may follow.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	for i, b := range data {
		switch b {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil
		}
	}
	if atEOF && len(data) > 0 {
		// A last line without its end: the stream was cut. Returning it
		// cannot complete an event (that needs a blank line after it).
		return len(data), data, nil
	}
	return 0, nil, nil
}
