package meshctl

import (
	"io"
	"unicode"
	"unicode/utf8"
)

// terminalSafe writes text for a terminal: what the orchestrator sends
// (agents' outputs, node ids, error messages) reaches it, and a control
// character or escape sequence in it could rewrite the screen, hide lines
// or set the clipboard (OSC 52). Every control character but newline and
// tab, every format character (the bidirectional overrides among them) and
// every byte that is not UTF-8 is written as U+FFFD. JSON output is left
// alone: its encoder escapes control characters, and programs read it.
type terminalSafe struct{ w io.Writer }

func (t terminalSafe) Write(p []byte) (int, error) {
	clean := true
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		if unsafeRune(r, size) {
			clean = false
			break
		}
		i += size
	}
	if clean {
		return t.w.Write(p)
	}
	out := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		if unsafeRune(r, size) {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// unsafeRune reports whether r (size bytes of input) must not reach a
// terminal as it is.
func unsafeRune(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return true // not UTF-8: a lone 0x9b is CSI to some terminals
	case r == '\n', r == '\t':
		return false
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}
