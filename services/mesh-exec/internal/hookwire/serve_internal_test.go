package hookwire

import (
	"context"
	"net"
	"testing"
	"time"
)

// Anything in the container can connect to the hook socket: Serve reads at
// most maxServing events at once, and the next one waits its turn rather
// than adding another event's bytes to mesh-exec's memory.
func TestServeReadsABoundedNumberOfEventsAtOnce(t *testing.T) {
	t.Parallel()
	ln, addr, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		_ = Serve(ln, func(event []byte) Answer { return Answer{Stdout: "allowed " + string(event)} })
	}()
	var held []net.Conn
	for range maxServing { // events that never end: each holds a reader
		c, err := net.Dial("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(`{"hook_event_name":`)); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	answered := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := Ask(ctx, addr, []byte("next"))
		if err != nil {
			answered <- err.Error()
			return
		}
		answered <- a.Stdout
	}()
	select {
	case got := <-answered:
		t.Fatalf("an event was read with %d others being read: %q", maxServing, got)
	case <-time.After(300 * time.Millisecond):
	}
	_ = held[0].Close() // one reader is free again
	select {
	case got := <-answered:
		if got != "allowed next" {
			t.Errorf("the waiting event's answer: %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting event was never read")
	}
}
