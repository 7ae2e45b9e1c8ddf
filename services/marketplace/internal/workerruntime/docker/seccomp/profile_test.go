package seccomp_test

import (
	"encoding/json"
	"flag"
	"os"
	"slices"
	"testing"

	moby "github.com/moby/profiles/seccomp"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker/seccomp"
)

var update = flag.Bool("update", false, "rewrite worker.json from Docker's default profile")

// generate is Docker's default profile with the refused calls taken out of
// every rule that allows them, and one rule refusing them with EPERM, so the
// file says what is refused and why.
func generate(t *testing.T) []byte {
	t.Helper()
	p := moby.DefaultProfile()
	kept := p.Syscalls[:0]
	for _, rule := range p.Syscalls {
		rule.Names = slices.DeleteFunc(rule.Names, func(n string) bool { return slices.Contains(seccomp.Refused, n) })
		if len(rule.Names) > 0 {
			kept = append(kept, rule)
		}
	}
	p.Syscalls = kept
	eperm := uint(1)
	refuse := &moby.Syscall{Comment: "Meshwork workers: refused (see package seccomp)"}
	refuse.Names = seccomp.Refused
	refuse.Action = "SCMP_ACT_ERRNO"
	refuse.ErrnoRet = &eperm
	p.Syscalls = append(p.Syscalls, refuse)
	b, err := json.MarshalIndent(p, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestProfileIsGenerated(t *testing.T) {
	want := generate(t)
	if *update {
		if err := os.WriteFile("worker.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return // the embedded copy is the old one until the next build
	}
	if seccomp.Profile != string(want) {
		t.Fatal("worker.json is not Docker's default profile minus seccomp.Refused: run go test -run TestProfileIsGenerated -update")
	}
}

// TestRefusedAreNeverAllowed reads the shipped file as the engine will: no
// rule but the refusing one names a refused call.
func TestRefusedAreNeverAllowed(t *testing.T) {
	var p moby.Seccomp
	if err := json.Unmarshal([]byte(seccomp.Profile), &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Fatalf("default action %q: want SCMP_ACT_ERRNO (refuse what is not listed)", p.DefaultAction)
	}
	refusing := 0
	for _, rule := range p.Syscalls {
		for _, n := range rule.Names {
			if !slices.Contains(seccomp.Refused, n) {
				continue
			}
			if rule.Action != "SCMP_ACT_ERRNO" {
				t.Errorf("%s is allowed by a rule with action %s", n, rule.Action)
			}
			refusing++
		}
	}
	if refusing != len(seccomp.Refused) {
		t.Errorf("the refusing rule names %d of the %d refused calls", refusing, len(seccomp.Refused))
	}
}
