package settings

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Table is the reference of fs's settings as a Markdown table: each flag,
// its environment variable, its default and what it does, in the flag
// set's order. docs/ shows it, kept in step with the code by [SyncDoc].
func (l Layers) Table(fs *pflag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| Flag | Environment | Default | Meaning |\n| --- | --- | --- | --- |\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Hidden {
			return
		}
		env := "none"
		if f.Name == l.ConfigFlag || !l.skipped(f.Name) {
			env = "`" + l.EnvName(f.Name) + "`"
		}
		def := "none"
		if f.DefValue != "" && f.DefValue != "[]" {
			def = "`" + f.DefValue + "`"
		}
		// The usage as written, without what Annotate appended.
		usage := strings.TrimSuffix(f.Usage, " (env "+l.EnvName(f.Name)+")")
		if f.Name == l.ConfigFlag && usage == "" {
			usage = "YAML file of these settings"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, env, cell(def), cell(usage))
	})
	return b.String()
}

// cell makes text safe in a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// SyncDoc keeps the Markdown file at path holding table between the lines
// "<!-- settings:name -->" and "<!-- /settings:name -->". With update it
// writes the table there; without, it fails when the file says something
// else, so that a test catches a setting documented wrong.
func SyncDoc(path, name, table string, update bool) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := []byte("<!-- settings:"+name+" -->\n"), []byte("<!-- /settings:"+name+" -->")
	i, j := bytes.Index(doc, begin), bytes.Index(doc, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q … %q markers", path, strings.TrimSpace(string(begin)), end)
	}
	inner := doc[i+len(begin) : j]
	if string(inner) == table {
		return nil
	}
	if !update {
		return errors.New(path + ": the settings table of " + name + " is not the code's: run this test with -update, and read the diff")
	}
	out := append(append(append([]byte{}, doc[:i+len(begin)]...), table...), doc[j:]...)
	return os.WriteFile(path, out, 0o644)
}
