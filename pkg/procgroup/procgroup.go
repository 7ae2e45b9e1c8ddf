// Package procgroup runs a command as the leader of its own process group,
// so that stopping it stops what it started too: a shell's background jobs,
// a test binary's children, an agent's tools. What leaves the group
// (setsid) is the job of package proctree's sweeper.
package procgroup

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// Lead makes cmd lead a process group of its own when it starts, keeping
// what else its SysProcAttr says (a Credential).
func Lead(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// Signal sends sig to the group that pid leads. A group that is gone
// already is not an error.
func Signal(pid int, sig syscall.Signal) error {
	if pid <= 0 {
		return errors.New("procgroup: no process") // -0 and -(-1) would signal more than the group
	}
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Kill ends the group that cmd leads at once; a command not started, or a
// group gone, is left alone.
func Kill(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = Signal(cmd.Process.Pid, syscall.SIGKILL)
	}
}

// CancelWith makes the cancellation of cmd's context send sig to its whole
// group, not only to the leader os/exec knows.
func CancelWith(cmd *exec.Cmd, sig syscall.Signal) {
	cmd.Cancel = func() error { return Signal(cmd.Process.Pid, sig) }
}

// Stop asks the group that pid leads to end (SIGTERM), and ends it
// (SIGKILL) if exited is not closed within grace.
func Stop(pid int, grace time.Duration, exited <-chan struct{}) {
	_ = Signal(pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		_ = Signal(pid, syscall.SIGKILL)
	}
}
