package proctree

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
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
// to it while anything else runs in its container, and how often a Sweeper
// reaps the zombies of orphans.
const orphanScan = time.Second

// idleScanMax is how long Idle, as PID 1, waits at most between two looks
// while it is alone in its container: an idle worker must cost its host no
// CPU (a wake-up a second is about 0.4 ms of CPU, 0.2 of a core for 500
// idle workers). Alone, nothing can be re-parented to it; a server that
// comes in through the engine's exec announces itself (Announce) and brings
// back a look a second until it is gone.
const idleScanMax = 30 * time.Second

// Idle is the main process of a worker container. It protects itself and,
// when it is PID 1, reaps every zombie and kills every process below it,
// until ctx ends: every second while another process runs in the
// container, and less and less often, up to idleScanMax, while none does;
// a server's Announce, or a child's exit, makes it look at once. Outside a
// PID namespace of its own (the process runtime) it only waits.
func Idle(ctx context.Context) error {
	if err := Protect(); err != nil {
		return err
	}
	if os.Getpid() != 1 {
		<-ctx.Done()
		return nil
	}
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, announceSignal, syscall.SIGCHLD)
	defer signal.Stop(wake)
	interval := orphanScan
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-wake:
			interval = orphanScan
		}
		// PID 1 starts nothing itself; what is below it was re-parented
		// from a server that died, with everything it has started since.
		procs := scan()
		if len(descendants(1, procs)) > 0 {
			killTree(1)
		}
		reapAny()
		var next time.Duration
		next, interval = nextLook(interval, alone(procs))
		timer.Reset(next)
	}
}

// nextLook returns how long Idle waits before its next look, and the wait
// after that one: a second while another process runs (alone is false),
// else the current interval, doubled for the next time up to idleScanMax.
func nextLook(interval time.Duration, alone bool) (next, after time.Duration) {
	if !alone {
		return orphanScan, orphanScan
	}
	return interval, min(2*interval, idleScanMax)
}

// alone reports whether procs holds no process but PID 1.
func alone(procs []proc) bool {
	for _, p := range procs {
		if p.pid != 1 {
			return false
		}
	}
	return true
}

// announceSignal is what Announce sends PID 1.
const announceSignal = syscall.SIGUSR1

// Announce tells the container's Idle that a server has come in through
// the engine's exec, so that it looks for orphans every second again; the
// servers call it when they start, before they run any command. It signals
// PID 1 only when PID 1 is Idle ("<binary> idle", which /proc/1/cmdline
// shows even though Idle is not dumpable) and this process came in from
// outside its PID namespace (its parent is not visible): never a foreign
// init (the engine's, whose children would take the signal, or a host's),
// and not the process runtime, where servers are the host's processes. It
// reports whether it signalled.
func Announce() (bool, error) {
	if os.Getpid() == 1 || os.Getppid() != 0 {
		return false, nil
	}
	cmdline, err := os.ReadFile("/proc/1/cmdline")
	if err != nil {
		return false, err
	}
	if args := strings.Split(string(cmdline), "\x00"); len(args) < 2 || args[1] != IdleCommand {
		return false, nil
	}
	if err := syscall.Kill(1, announceSignal); err != nil {
		return false, os.NewSyscallError("kill(1, SIGUSR1)", err)
	}
	return true, nil
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
	mu       sync.Mutex
	running  int
	starting int          // begun, pid not yet known
	pids     map[int]bool // the commands' own processes, waited for by their callers
	self     int
	// subreaper is whether orphans come back to the server (see NewSweeper).
	subreaper bool
}

// Subreaper reports whether the server is its descendants' subreaper; see
// NewSweeper.
func (s *Sweeper) Subreaper() bool { return s.subreaper }

// NewSweeper makes the calling process the subreaper of its descendants:
// a process whose parent exits is re-parented to it rather than to PID 1,
// so it stays within reach of the sweep. It also reaps, every second, the
// zombies of such orphans, so a long run does not fill the pid limit with
// them.
//
// A kernel without child subreapers (gVisor's, as Debian packages it)
// refuses the prctl with EINVAL: the Sweeper then still ends what stays
// below the server, and an orphan that left it goes to PID 1, whose idle
// (Idle) ends it within a second; Subreaper reports which it is.
//
// It also announces the server to the container's Idle (Announce), so
// that orphans which reach PID 1 end within a second; a failed announce is
// logged on logger, not fatal.
func NewSweeper(logger *slog.Logger) (*Sweeper, error) {
	subreaper := true
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); errors.Is(err, unix.EINVAL) {
		subreaper = false
	} else if err != nil {
		return nil, os.NewSyscallError("prctl(PR_SET_CHILD_SUBREAPER)", err)
	}
	if _, err := Announce(); err != nil {
		logger.Warn("telling the container's init that a server runs failed: orphans of its commands may outlive them until its next look",
			slog.Duration("at_most", idleScanMax), slog.Any("error", err))
	}
	s := &Sweeper{self: os.Getpid(), pids: map[int]bool{}, subreaper: subreaper}
	go func() {
		for range time.Tick(orphanScan) {
			s.reapOrphans()
		}
	}()
	return s, nil
}

// A Command is one registered command of a Sweeper.
type Command struct {
	s     *Sweeper
	pid   int
	known bool
	once  sync.Once
}

// Begin registers a command about to start. Call Started with its pid once
// it has started (or End if it did not), and End once it has been waited
// for: when no other registered command is running, every descendant left
// is killed and reaped before End returns. Commands that begin meanwhile
// wait for the sweep, so it never takes one of theirs. A nil Sweeper (a
// server that sweeps nothing) returns a nil Command, whose methods do
// nothing.
func (s *Sweeper) Begin() *Command {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.running++
	s.starting++
	s.mu.Unlock()
	return &Command{s: s}
}

// Started records the command's pid: its exit status is its caller's to
// collect, never the reaper's.
func (c *Command) Started(pid int) {
	if c == nil {
		return
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.known {
		return
	}
	c.pid, c.known = pid, true
	s.starting--
	s.pids[pid] = true
}

// End marks the command done; a second call is a no-op.
func (c *Command) End() {
	if c == nil {
		return
	}
	c.once.Do(func() {
		s := c.s
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.known {
			delete(s.pids, c.pid)
		} else {
			s.starting--
		}
		s.running--
		if s.running == 0 {
			killTree(s.self)
		}
	})
}

// reapOrphans collects the exited children that are not registered
// commands: orphans re-parented to us. While a command is starting, its pid
// is not known yet, so nothing is reaped.
func (s *Sweeper) reapOrphans() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.starting > 0 {
		return
	}
	for _, p := range scan() {
		if p.ppid == s.self && p.zombie && !s.pids[p.pid] {
			_, _ = syscall.Wait4(p.pid, nil, syscall.WNOHANG, nil)
		}
	}
}

// sweepLimit bounds a sweep: only a process stuck in the kernel outlasts
// SIGSTOP and SIGKILL, and that one is left to the container's end rather
// than holding up the server.
const sweepLimit = 5 * time.Second

// killTree ends every descendant of root. Each is stopped first, round
// after round, until a scan finds none running: a stopped process cannot
// fork, so a lineage that forks faster than it is killed is still caught
// (the pid limit bounds the rounds). Then all are killed, and root's own
// children among them reaped.
func killTree(root int) {
	deadline := time.Now().Add(sweepLimit)
	for time.Now().Before(deadline) {
		left := descendants(root, scan())
		if len(left) == 0 {
			return
		}
		for stopped := map[int]bool{}; time.Now().Before(deadline); {
			fresh := 0
			for _, p := range left {
				if !stopped[p.pid] {
					_ = syscall.Kill(p.pid, syscall.SIGSTOP)
					stopped[p.pid] = true
					fresh++
				}
			}
			if fresh == 0 {
				break
			}
			left = descendants(root, scan())
		}
		for _, p := range left {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		for _, p := range left {
			if p.ppid == root {
				_, _ = syscall.Wait4(p.pid, nil, syscall.WNOHANG, nil)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type proc struct {
	pid, ppid int
	zombie    bool
}

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
		ppid, state, err := statOf(pid)
		if err != nil {
			continue
		}
		out = append(out, proc{pid: pid, ppid: ppid, zombie: state == "Z"})
	}
	return out
}

// statOf reads a process's parent and state from /proc/<pid>/stat. The
// command name, in parentheses, may itself hold spaces and parentheses, so
// the fields are counted from the last ')'.
func statOf(pid int) (ppid int, state string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", errors.New("malformed stat")
	}
	// After ") ": state, ppid, ...
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0, "", errors.New("malformed stat")
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, fields[0], err
}
