package progress_test

import (
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/progress"
)

func TestTallyWait(t *testing.T) {
	t.Parallel()
	var tl progress.Tally
	go func() {
		for range 3 {
			time.Sleep(5 * time.Millisecond)
			tl.Handled()
		}
	}()
	tl.Wait(3, 10*time.Second)
	if tl.Count() != 3 {
		t.Fatalf("Wait returned at %d of 3", tl.Count())
	}
	start := time.Now()
	tl.Wait(4, 50*time.Millisecond) // never comes: bounded
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("Wait returned before its timeout")
	}
	if n, ok := progress.Sent(map[string]any{progress.SentMetaKey: float64(7)}); !ok || n != 7 {
		t.Fatalf("Sent = %d, %v", n, ok)
	}
	if _, ok := progress.Sent(nil); ok {
		t.Fatal("Sent of no meta")
	}
}
