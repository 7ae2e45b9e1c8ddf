package servicetest_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/servicetest"
)

// The address comes from the first log line with the message asked for,
// however the log is split into writes; Stop ends the process.
func TestStartFindsTheAddress(t *testing.T) {
	script := `printf '{"msg":"starting","addr":"127.0.0.1:1"}\n{"msg":"serv' >&2; sleep 0.1
printf 'ing","addr":"127.0.0.1:2"}\nplain text\n' >&2; exec sleep 30`
	p := servicetest.Start(t, exec.Command("sh", "-c", script), "serving")
	if p.Addr != "127.0.0.1:2" {
		t.Errorf("addr %q, want the serving line's", p.Addr)
	}
	start := time.Now()
	p.Stop(5 * time.Second)
	select {
	case <-p.Exited():
	default:
		t.Error("the process is still running after Stop")
	}
	if time.Since(start) > 4*time.Second {
		t.Errorf("Stop took %v: SIGTERM should have ended it", time.Since(start))
	}
	if !strings.Contains(p.Log(), `"msg":"starting"`) {
		t.Errorf("the log lacks its first line:\n%s", p.Log())
	}
}
