package proctree

import (
	"testing"
	"time"
)

// Alone, idle's looks come further and further apart, up to idleScanMax;
// any other process brings back a look a second, and the back-off starts
// over from there.
func TestNextLook(t *testing.T) {
	interval := orphanScan
	var waits []time.Duration
	for range 7 {
		var next time.Duration
		next, interval = nextLook(interval, true)
		waits = append(waits, next)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		if waits[i] != want[i]*time.Second {
			t.Fatalf("waits alone: %v, want %v seconds", waits, want)
		}
	}
	next, interval := nextLook(interval, false)
	if next != orphanScan || interval != orphanScan {
		t.Errorf("with another process: next %v, then %v; want a second, then a second", next, interval)
	}
	if next, _ := nextLook(interval, true); next != orphanScan {
		t.Errorf("alone again: next %v, want a second", next)
	}
}

func TestAlone(t *testing.T) {
	if !alone([]proc{{pid: 1}}) || !alone(nil) {
		t.Error("PID 1 by itself is not alone")
	}
	if alone([]proc{{pid: 1}, {pid: 7, ppid: 0}}) {
		t.Error("PID 1 with an exec'd server is alone")
	}
}
