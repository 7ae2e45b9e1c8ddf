package meshctl

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// terminalSafe writes text for a terminal: what the orchestrator sends
// (agents' outputs, node ids, error messages) reaches it, and a control
// character or escape sequence in it could rewrite the screen, hide lines
// or set the clipboard (OSC 52). Every control character but newline and
// tab, every format character (the bidirectional overrides among them) and
// every byte that is not UTF-8 is written as U+FFFD; a carriage return
// before a newline (an agent's Windows line ending) is dropped.
type terminalSafe struct{ w io.Writer }

func (t terminalSafe) Write(p []byte) (int, error) {
	return rewrite(t.w, p, func(out []byte, r rune) []byte { return utf8.AppendRune(out, utf8.RuneError) })
}

// jsonSafe writes JSON for a terminal as terminalSafe writes text, but
// keeps the data: the JSON encoder escapes the C0 control characters, and
// this escapes the rest a terminal acts on (DEL, the C1 controls such as
// U+009B, format characters) as \uXXXX, which they can only be inside a
// JSON string. Programs read the same values.
type jsonSafe struct{ w io.Writer }

func (j jsonSafe) Write(p []byte) (int, error) {
	return rewrite(j.w, p, func(out []byte, r rune) []byte {
		if r == utf8.RuneError {
			return utf8.AppendRune(out, r) // encoding/json never writes one raw
		}
		if r > 0xffff {
			hi, lo := utf16.EncodeRune(r)
			return fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		}
		return fmt.Appendf(out, `\u%04x`, r)
	})
}

// rewrite writes p to w with every rune a terminal must not get as it is
// replaced by what replace appends for it.
func rewrite(w io.Writer, p []byte, replace func(out []byte, r rune) []byte) (int, error) {
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
		return w.Write(p)
	}
	out := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == '\r' && i+1 < len(p) && p[i+1] == '\n':
		case unsafeRune(r, size):
			out = replace(out, r)
		default:
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	if _, err := w.Write(out); err != nil {
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
