package cliout

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTail(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5000) + "\nthe last word\n"
	tests := []struct {
		name, in, want string
	}{
		{"short output stays whole", "  done\n", "done"},
		{"long output keeps its end from a line start", long, "the last word"},
		{"a cut rune is dropped", strings.Repeat("é", 3000) + "a", strings.Repeat("é", 2047) + "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Tail(tt.in)
			if got != tt.want {
				t.Errorf("Tail = %.40q (%d bytes), want %.40q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
			if !utf8.ValidString(got) || len(got) > 4<<10 {
				t.Errorf("Tail is %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}

func TestStderrTailDropsColoursAndKeepsTheLastLines(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 30 {
		b.WriteString("\x1b[31mline ")
		b.WriteString(strings.Repeat("z", i))
		b.WriteString("\x1b[0m\n")
	}
	got := StderrTail(b.String())
	lines := strings.Split(got, "\n")
	if len(lines) != 20 || strings.Contains(got, "\x1b") || lines[19] != "line "+strings.Repeat("z", 29) {
		t.Errorf("StderrTail = %q", got)
	}
}
