package proctree

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Protect makes the calling process non-dumpable. It holds until the
// process execs another program, so the commands the process starts are not
// affected.
func Protect() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_DUMPABLE)", err)
	}
	return nil
}

// Dumpable reports whether the calling process is dumpable.
func Dumpable() (bool, error) {
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return false, os.NewSyscallError("prctl(PR_GET_DUMPABLE)", err)
	}
	return v != 0, nil
}

// orphanScan is how often Idle, as PID 1, looks for processes re-parented
// to it.
const orphanScan = time.Second

// Idle is the main process of a worker container. It protects itself and,
// when it is PID 1, reaps every zombie and kills every process re-parented
// to it, until ctx ends. Outside a PID namespace of its own (the process
// runtime) it only waits.
func Idle(ctx context.Context) error {
	if err := Protect(); err != nil {
		return err
	}
	if os.Getpid() != 1 {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(orphanScan)
	defer tick.Stop()
	for {
		for _, p := range scan() {
			if p.ppid == 1 {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		reapAny()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// reapAny collects every exited child without blocking.
func reapAny() {
	for {
		pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// A Sweeper ends, with the last command a server runs, every process those
// commands left behind. Commands are registered with Begin; the server must
// start no other child processes, since a sweep kills all its descendants.
type Sweeper struct {
	mu      sync.Mutex
	running int
	self    int
}

// NewSweeper makes the calling process the subreaper of its descendants:
// a process whose parent exits is re-parented to it rather than to PID 1,
// so it stays within reach of the sweep.
func NewSweeper() (*Sweeper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, os.NewSyscallError("prctl(PR_SET_CHILD_SUBREAPER)", err)
	}
	return &Sweeper{self: os.Getpid()}, nil
}

// Begin registers a command about to start. Call end once the command has
// been waited for: when no other registered command is running, every
// descendant left is killed and reaped before end returns. Commands that
// begin meanwhile wait for the sweep, so it never takes one of theirs.
func (s *Sweeper) Begin() (end func()) {
	s.mu.Lock()
	s.running++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.running--
			if s.running == 0 {
				s.sweep()
			}
		})
	}
}

// sweepLimit bounds a sweep: SIGKILL cannot be caught, so only a process
// stuck in the kernel outlasts it, and that one is left to the container's
// end rather than holding up the server.
const sweepLimit = 5 * time.Second

// sweep kills every descendant until none is left. A process may fork
// between the scan and the kill; its child is re-parented to us and caught
// by the next round.
func (s *Sweeper) sweep() {
	deadline := time.Now().Add(sweepLimit)
	for time.Now().Before(deadline) {
		left := descendants(s.self, scan())
		if len(left) == 0 {
			return
		}
		for _, p := range left {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		for _, p := range left {
			if p.ppid == s.self {
				_, _ = syscall.Wait4(p.pid, nil, syscall.WNOHANG, nil)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type proc struct{ pid, ppid int }

// descendants returns the processes of procs below root.
func descendants(root int, procs []proc) []proc {
	children := make(map[int][]proc, len(procs))
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// scan lists the processes in /proc with their parents. A process that
// exits during the scan is left out.
func scan() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]proc, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, err := parentOf(pid)
		if err != nil {
			continue
		}
		out = append(out, proc{pid: pid, ppid: ppid})
	}
	return out
}

// parentOf reads a process's parent from /proc/<pid>/stat. The command
// name, in parentheses, may itself hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	// After ") ": state, ppid, ...
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0, errors.New("malformed stat")
	}
	return strconv.Atoi(fields[1])
}
