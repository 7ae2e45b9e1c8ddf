package journeys

import (
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// An exec's audit target shows where its arguments begin and end, and stays
// within its bound however long the arguments, with a mark when it is cut.
func TestAuditTarget(t *testing.T) {
	t.Parallel()
	exec := func(argv ...string) *meshtype.Action {
		return &meshtype.Action{Type: meshtype.ActionExec, Command: argv}
	}
	long := strings.Repeat("\u200b", 4<<20) // quoting makes each one longer
	for _, tc := range []struct {
		name   string
		action *meshtype.Action
		want   string // the target, or its start when it ends with the mark
		cut    bool
	}{
		{"a path", &meshtype.Action{Type: meshtype.ActionRead, Target: "a b.go"}, "a b.go", false},
		{"plain words", exec("go", "test", "./..."), "go test ./...", false},
		{"spaces, quotes, a newline", exec("rm", "-rf", "a b", "it's", "x\ny"), `rm -rf 'a b' "it's" $'x\ny'`, false},
		{"an empty argument", exec("echo", ""), "echo ''", false},
		{"a long argument", exec("echo", strings.Repeat("k", 5000)), "echo kkk", true},
		{"many arguments", exec(strings.Split(strings.Repeat("ab ", 1000), " ")...), "ab ab ab", true},
		{"megabytes that quote longer", exec("echo", long), "echo ", true},
	} {
		got := auditTarget(tc.action)
		switch {
		case !tc.cut && got != tc.want:
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		case tc.cut && (!strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, "…") || len(got) > maxAuditTarget+len("…")):
			t.Errorf("%s: %d bytes %q…, want at most %d starting %q and marked as cut", tc.name, len(got), got[:min(40, len(got))], maxAuditTarget, tc.want)
		}
	}
}
