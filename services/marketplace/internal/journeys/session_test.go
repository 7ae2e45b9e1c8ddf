package journeys

import (
	"strings"
	"testing"
)

// The session a worker reports is kept only when it is an id: anything
// else (a NUL, a path, a megabyte) leaves the journey its session.
func TestKeptSession(t *testing.T) {
	for _, c := range []struct {
		reported, previous, kept string
		ok                       bool
	}{
		{"", "", "", true},
		{"", "s1", "s1", true},
		{"0b7c4f0e-2d7a-4f7e-9d55-8f0a9c0e1b2a", "s1", "0b7c4f0e-2d7a-4f7e-9d55-8f0a9c0e1b2a", true},
		{"ses_abc123", "", "ses_abc123", true},
		{"s1\x00", "s1", "s1", false},
		{"../../etc/passwd", "s1", "s1", false},
		{strings.Repeat("a", 129), "", "", false},
	} {
		kept, ok := keptSession(c.reported, c.previous)
		if kept != c.kept || ok != c.ok {
			t.Errorf("keptSession(%.20q, %q) = %q, %t; want %q, %t", c.reported, c.previous, kept, ok, c.kept, c.ok)
		}
	}
}
