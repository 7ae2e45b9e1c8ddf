package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// sleeperEnv makes this binary the hang step's child: it sleeps until
// killed ("ignore-term": and ignores SIGTERM).
const sleeperEnv = "FAKE_CLAUDE_SLEEPER"

// sleepForever blocks until the process is killed. (An empty select would
// be reported as a deadlock by the runtime.)
func sleepForever() {
	if os.Getenv(sleeperEnv) == "ignore-term" {
		signal.Ignore(syscall.SIGTERM)
	}
	// Tell the parent we are set up (fd 3 is its pipe), so that a signal
	// it lets through after that finds us ignoring SIGTERM already.
	if ready := os.NewFile(3, "ready"); ready != nil {
		_, _ = ready.Write([]byte{1})
		_ = ready.Close()
	}
	for {
		time.Sleep(time.Hour)
	}
}

// hang is the hang step: start a sleeping child in our process group (this
// binary again, so it works where there is no sleep(1)), say so, and sleep
// until a signal ends the turn (see onSIGTERM) or kills us.
func (t *turn) hang(h hangStep) {
	mode := "1"
	if h.ChildIgnoresSIGTERM {
		mode = "ignore-term"
	}
	child := -1
	if exe, err := os.Executable(); err == nil {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), sleeperEnv+"="+mode)
		// The child holds our stdout and stderr, like a tool's background
		// process would: whoever reads them sees EOF only when it is gone.
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := startChild(cmd); err == nil {
			child = cmd.Process.Pid
		} else {
			fmt.Fprintln(os.Stderr, "fake claude: starting the hang child:", err)
		}
	}
	if h.IgnoreSIGTERM {
		signal.Ignore(syscall.SIGTERM)
	}
	if h.PIDFile != "" {
		if err := os.WriteFile(h.PIDFile, fmt.Appendf(nil, "%d %d\n", os.Getpid(), child), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "fake claude: pid_file:", err)
		}
	}
	t.say(fmt.Sprintf("hanging (pid %d, child %d)", os.Getpid(), child), "tool_use")
	for {
		time.Sleep(time.Hour)
	}
}

// startChild starts the sleeper and waits until it says it is set up.
func startChild(cmd *exec.Cmd) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		return err
	}
	_, err = r.Read(make([]byte, 1))
	return err
}
