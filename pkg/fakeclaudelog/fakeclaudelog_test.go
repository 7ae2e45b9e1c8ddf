package fakeclaudelog_test

import (
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/meshwork/meshwork/pkg/fakeclaudelog"
)

// Runs appended at once each come back whole, in some order; a missing log
// holds none; a line that is not JSON is an error.
func TestAppendRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if got, err := fakeclaudelog.Read(path); got != nil || err != nil {
		t.Fatalf("a missing log: %v, %v", got, err)
	}
	var wg sync.WaitGroup
	for pid := 1; pid <= 20; pid++ {
		wg.Go(func() {
			inv := fakeclaudelog.Invocation{Argv: []string{"claude", "-p", "--resume", "s"}, Cwd: "/w", StdinIsDevNull: true, UID: 1000, PID: pid}
			if err := fakeclaudelog.Append(path, inv); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := fakeclaudelog.Read(path)
	if err != nil || len(got) != 20 {
		t.Fatalf("%d runs, %v", len(got), err)
	}
	seen := map[int]bool{}
	for _, inv := range got {
		seen[inv.PID] = true
		if want := (fakeclaudelog.Invocation{Argv: []string{"claude", "-p", "--resume", "s"}, Cwd: "/w", StdinIsDevNull: true, UID: 1000, PID: inv.PID}); !reflect.DeepEqual(inv, want) {
			t.Errorf("read %+v, want %+v", inv, want)
		}
	}
	if len(seen) != 20 || got[0].Args() != "claude -p --resume s" {
		t.Errorf("pids %v, args %q", seen, got[0].Args())
	}
	if err := os.WriteFile(path, []byte("{\"pid\": 1}\n{\"pid\": 2, \"ar{\"pid\": 3}\n{\"pid\": 4}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := fakeclaudelog.Read(path); err == nil || len(got) != 2 || got[0].PID != 1 || got[1].PID != 4 {
		t.Errorf("a line cut short: %+v, %v; want the runs on either side of it and an error", got, err)
	}
}
