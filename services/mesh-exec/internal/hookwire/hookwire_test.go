package hookwire_test

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/hookwire"
)

// The client hands the event over and prints the server's answer; every
// way of not getting one is exit status 2, which blocks the tool call.
func TestRun(t *testing.T) {
	t.Parallel()
	ln, addr, err := hookwire.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		_ = hookwire.Serve(ln, func(event []byte) hookwire.Answer {
			switch string(event) {
			case "deny":
				return hookwire.Answer{Stdout: `{"hookSpecificOutput":{"permissionDecision":"deny"}}`}
			case "odd":
				return hookwire.Answer{Code: 1}
			}
			return hookwire.Answer{Stdout: "allowed " + string(event) + "\n"}
		})
	}()
	env := func(a string) func(string) string {
		return func(k string) string {
			if k == hookwire.SocketEnv {
				return a
			}
			return ""
		}
	}
	run := func(event, addr string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := hookwire.Run(strings.NewReader(event), &stdout, &stderr, env(addr))
		return code, stdout.String(), stderr.String()
	}
	if code, out, _ := run("ok", addr); code != 0 || out != "allowed ok\n" {
		t.Errorf("allowed: %d %q", code, out)
	}
	if code, out, _ := run("deny", addr); code != 0 || !strings.Contains(out, `"deny"`) {
		t.Errorf("denied: %d %q", code, out)
	}
	if code, _, errOut := run("odd", addr); code != 2 || !strings.Contains(errOut, "neither 0 nor 2") {
		t.Errorf("an answer with another status: %d %q", code, errOut)
	}
	if code, _, errOut := run("ok", ""); code != 2 || !strings.Contains(errOut, hookwire.SocketEnv+" is not set") {
		t.Errorf("no socket: %d %q", code, errOut)
	}
	if code, _, errOut := run("ok", "@meshwork-hook-nobody-listens"); code != 2 || !strings.Contains(errOut, "reaching mesh-exec") {
		t.Errorf("nobody listening: %d %q", code, errOut)
	}
	// A server that closes without answering.
	mute, err := net.Listen("unix", "@meshwork-hook-mute-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	if code, _, errOut := run("ok", "@meshwork-hook-mute-"+t.Name()); code != 2 || !strings.Contains(errOut, "the tool call is refused") {
		t.Errorf("no answer: %d %q", code, errOut)
	}
}
