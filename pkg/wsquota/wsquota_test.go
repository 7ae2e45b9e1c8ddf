package wsquota

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A command that makes and removes directories while the workspace is
// measured (a build's temporary directories) never fails the measure: a
// failed measure kills the command, so it must not fail for an entry that
// went away.
func TestMeasureWhileDirectoriesComeAndGo(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	q := New(root, 1<<30, 1<<20)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			dir := filepath.Join(root, "tmp", fmt.Sprint("b", i%7))
			for j := range 20 {
				sub := filepath.Join(dir, fmt.Sprint(j))
				_ = os.MkdirAll(sub, 0o755)
				_ = os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o644)
			}
			_ = os.RemoveAll(dir)
		}
	}()
	deadline := time.Now().Add(500 * time.Millisecond)
	walks := 0
	for time.Now().Before(deadline) {
		if _, err := q.measure(); err != nil {
			t.Fatalf("walk %d: %v", walks, err)
		}
		walks++
	}
	close(stop)
	<-done
	if walks < 10 {
		t.Errorf("only %d walks in the window", walks)
	}
}
