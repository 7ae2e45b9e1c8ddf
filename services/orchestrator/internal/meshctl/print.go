package meshctl

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// printJSON prints v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printJSONLine prints v as JSON on one line.
func printJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// textWriter writes text and keeps the first error, which the command
// returns once it is done: a closed stdout ends it with an error.
type textWriter struct {
	w   io.Writer
	err error
}

func newText(w io.Writer) *textWriter { return &textWriter{w: w} }

func (t *textWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

func (t *textWriter) println(args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintln(t.w, args...)
	}
}

// table writes tab-separated columns, aligned when done.
type table struct {
	*textWriter
	tw *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	return &table{textWriter: newText(tw), tw: tw}
}

// done writes the table and returns the first error.
func (t *table) done() error {
	if t.err == nil {
		t.err = t.tw.Flush()
	}
	return t.err
}

// note writes a remark for people on stderr; such remarks are not the
// command's output, so a failure to write them does not matter.
func note(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}

func (a *app) time(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(a.cfg.loc).Format("2006-01-02 15:04:05")
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return prefix + "(empty)"
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// oneLine is the first line of s, cut to n runes.
func oneLine(s string, n int) string {
	s = strings.TrimSpace(s)
	first, _, more := strings.Cut(s, "\n")
	// One line in a table or a progress line: a tab or carriage return
	// would break its layout. (Escape sequences are terminalSafe's, for
	// everything meshctl prints.)
	first = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '�'
		}
		return r
	}, first)
	r := []rune(first)
	if len(r) > n {
		return string(r[:n]) + "…"
	}
	if more {
		return first + " …"
	}
	return first
}

// plural is "1 attempt" or "3 attempts".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// jsonText is v as compact JSON.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// valueText is an approval's value as a person reads it: a JSON string as
// its text, anything else as JSON.
func valueText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// short is the first 12 characters of a hash.
func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// approveCommand is the command that resumes an interrupt.
func approveCommand(interruptID string) string {
	return "meshctl runs approve " + interruptID + " --value approved"
}

// printOutputs prints each node's output, in the pipeline's order.
func printOutputs(w *textWriter, v api.RunView) {
	if len(v.Outputs) == 0 {
		return
	}
	w.println("Outputs:")
	done := map[string]bool{}
	for _, n := range v.Nodes {
		if out, ok := v.Outputs[n.ID]; ok {
			w.printf("  %s:\n%s\n", n.ID, indent(out, "    "))
			done[n.ID] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(v.Outputs)) {
		if !done[id] {
			w.printf("  %s:\n%s\n", id, indent(v.Outputs[id], "    "))
		}
	}
}
