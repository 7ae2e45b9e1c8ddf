// Package runtimetest is the conformance suite of workerruntime.Runtime: every
// implementation's tests call [Exercise], which drives the implementation
// with real workers (containers, processes) and checks the behaviour the
// marketplace relies on: lifecycle and states, exec sessions as clean byte
// pipes (stdout only, exit codes), workspaces that survive stop, start and
// resume and are separate per journey, listing by label, idempotent removal
// and refusal of unsafe specs.
//
// Workers are observed from the inside with a small static helper program,
// the probe (testdata/probe; see [BuildProbe]), which each implementation
// makes runnable in its workers through [Options.Probe].
package runtimetest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// LabelTest marks everything a test creates, so leftovers can be found and
// removed; LabelCase narrows it to one case of the suite.
const (
	LabelTest = "meshwork.test"
	LabelCase = "meshwork.test.case"
)

// Options adapt the suite to an implementation.
type Options struct {
	// Image is Spec.Image. Defaults to meshwork/worker:latest.
	Image string
	// Cmd is Spec.Cmd. Defaults to ["idle"] (the worker image's entrypoint
	// is meshworker).
	Cmd []string
	// App is the path of meshworker inside a worker. Defaults to
	// /usr/local/bin/app.
	App string
	// Probe makes the probe binary (built by BuildProbe) runnable in the
	// running worker h and returns the argv[0] that runs it. It may be
	// called more than once per worker. Required.
	Probe func(t *testing.T, rt workerruntime.Runtime, h workerruntime.Handle) string
	// EnforcesUser says exec'd processes run as Spec.User; the suite then
	// checks their uid. False for runtimes that cannot change user.
	EnforcesUser bool
	// Labels are put on every worker the suite creates and must contain
	// LabelTest. Defaults to LabelTest=runtimetest-<random>.
	Labels map[string]string
	// OCIRuntime is Spec.OCIRuntime ("runsc": the suite under gVisor).
	// Defaults to the engine's default.
	OCIRuntime string
	// OwnInit says a worker's main process (Cmd, meshworker idle) is PID 1
	// of a PID namespace of its own, as in a container: the suite then
	// checks that it ends orphans.
	OwnInit bool
}

// The spec the suite creates workers with.
const (
	testUser   = "65532:65532"
	testWorker = "runtimetest_v1"
)

// runTimeout bounds one exec in the suite, so a broken session fails the
// test instead of hanging it.
const runTimeout = 2 * time.Minute

// RequireGVisor skips tb unless the engine has gVisor's runsc runtime
// (deploy/dev/gvisor.sh registers it); with MESHWORK_REQUIRE_RUNSC set (CI)
// it fails instead, so the suites under gVisor cannot quietly not run.
func RequireGVisor(tb testing.TB) {
	tb.Helper()
	out, err := exec.CommandContext(context.Background(), "docker", "info", "--format", "{{json .Runtimes}}").Output()
	if err == nil && strings.Contains(string(out), `"runsc"`) {
		return
	}
	if os.Getenv("MESHWORK_REQUIRE_RUNSC") != "" {
		tb.Fatal("the engine has no runsc runtime (run deploy/dev/gvisor.sh)")
	}
	tb.Skip("the engine has no runsc runtime (deploy/dev/gvisor.sh registers it)")
}

// BuildProbe builds the probe, static, for the machine's architecture, and
// returns its path. It needs the go command (the test's toolchain).
func BuildProbe(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("building the probe needs the go command on PATH: %v", err)
	}
	_, self, _, ok := goruntime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the runtimetest package source")
	}
	out := filepath.Join(t.TempDir(), "probe")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-trimpath", "-o", out, "./testdata/probe")
	cmd.Dir = filepath.Dir(self)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goruntime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, b)
	}
	return out
}

// Exercise runs the conformance suite. newRuntime is called once per case
// (the cases run in parallel) and must return a ready runtime; it should
// release it with t.Cleanup.
func Exercise(t *testing.T, newRuntime func(t *testing.T) workerruntime.Runtime, opts Options) {
	t.Helper()
	if opts.Probe == nil {
		t.Fatal("runtimetest: Options.Probe is required")
	}
	if opts.Image == "" {
		opts.Image = "meshwork/worker:latest"
	}
	if opts.Cmd == nil {
		opts.Cmd = []string{"idle"}
	}
	if opts.App == "" {
		opts.App = "/usr/local/bin/app"
	}
	if opts.Labels[LabelTest] == "" {
		opts.Labels = maps.Clone(opts.Labels)
		if opts.Labels == nil {
			opts.Labels = map[string]string{}
		}
		opts.Labels[LabelTest] = "runtimetest-" + uuid.NewString()[:8]
	}
	setup := func(t *testing.T) *bundle {
		t.Helper()
		t.Parallel()
		b := &bundle{rt: newRuntime(t), opts: opts, labels: maps.Clone(opts.Labels)}
		b.labels[LabelCase] = uuid.NewString()
		// Registered first, so it runs last: whatever a failed case left.
		t.Cleanup(func() { b.sweep(t) })
		return b
	}

	t.Run("CreateStartsARunningWorker", func(t *testing.T) {
		b := setup(t)
		journey, h := b.create(t)
		if h.ID == "" || h.Workspace == "" {
			t.Fatalf("Create returned an incomplete handle %+v", h)
		}
		b.wantState(t, h, workerruntime.StateRunning)
		if got := b.rt.Name(); got == "" {
			t.Error("Name() is empty")
		}
		l := b.listed(t, journey)
		if len(l) != 1 {
			t.Fatalf("List found %d workers for journey %s, want 1: %+v", len(l), journey, l)
		}
		if l[0].ID != h.ID || l[0].Workspace != h.Workspace || l[0].Worker != testWorker || l[0].State != workerruntime.StateRunning {
			t.Errorf("List returned %+v, want handle %+v, worker %s, state running", l[0], h, testWorker)
		}
	})

	t.Run("ExecRunsMeshworker", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		out, code := b.run(t, h, nil, opts.App, "version")
		if code != 0 {
			t.Fatalf("%s version exited %d, output %q", opts.App, code, out)
		}
		if !strings.HasPrefix(string(out), "meshworker ") || strings.Count(string(out), "\n") != 1 {
			t.Errorf("%s version printed %q, want one line starting with %q", opts.App, out, "meshworker ")
		}
	})

	t.Run("ExecRoundTripsStdin", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		in := make([]byte, 1<<20) // larger than any pipe or frame buffer
		_, _ = rand.Read(in)
		out, code := b.run(t, h, in, b.probe(t, h), "echo")
		if code != 0 {
			t.Fatalf("probe echo exited %d", code)
		}
		if !bytes.Equal(out, in) {
			t.Errorf("echo returned %d bytes, want the %d written (equal prefix %d bytes)", len(out), len(in), commonPrefix(out, in))
		}
	})

	t.Run("ExecStdoutCarriesNoStderr", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		in := bytes.Repeat([]byte("protocol line\n"), 20000)
		out, code := b.run(t, h, in, b.probe(t, h), "noisy-echo")
		if code != 0 {
			t.Fatalf("probe noisy-echo exited %d", code)
		}
		if bytes.Contains(out, []byte("noise")) {
			t.Fatal("stderr leaked into the session's stdout")
		}
		if !bytes.Equal(out, in) {
			t.Errorf("stdout has %d bytes, want exactly the %d echoed", len(out), len(in))
		}
	})

	t.Run("ExecReportsExitCodes", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		if _, code := b.run(t, h, nil, b.probe(t, h), "exit", "3"); code != 3 {
			t.Errorf("probe exit 3: Wait returned %d", code)
		}
		if _, code := b.run(t, h, nil, b.probe(t, h), "stderr", "to", "stderr"); code != 0 {
			t.Errorf("probe stderr: Wait returned %d", code)
		}
	})

	t.Run("ExecOfAMissingBinaryFails", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		s, err := b.rt.Exec(t.Context(), h, []string{"/usr/local/bin/does-not-exist"})
		if err != nil {
			return // refused up front: fine
		}
		defer s.Close()
		_ = s.CloseWrite()
		_, _ = io.Copy(io.Discard, s)
		if code, err := s.Wait(); err == nil && code == 0 {
			t.Error("exec of a missing binary succeeded with exit code 0")
		}
	})

	t.Run("ExecRunsInTheWorkspaceAsTheWorkerUser", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		out, code := b.run(t, h, nil, b.probe(t, h), "whoami")
		if code != 0 {
			t.Fatalf("probe whoami exited %d", code)
		}
		ids, cwd, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		if cwd != workerruntime.WorkspacePath && cwd != h.Workspace {
			t.Errorf("exec ran in %q, want %s (or the workspace directory %s)", cwd, workerruntime.WorkspacePath, h.Workspace)
		}
		if opts.EnforcesUser && ids != testUser {
			t.Errorf("exec ran as %s, want %s", ids, testUser)
		}
	})

	t.Run("StopAndStartKeepTheWorkspace", func(t *testing.T) {
		b := setup(t)
		journey, h := b.create(t)
		b.writeFile(t, h, "notes/kept.txt", "survives stop and start\n")
		if err := b.rt.Stop(t.Context(), h, 10*time.Second); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		b.wantState(t, h, workerruntime.StateStopped)
		if l := b.listed(t, journey); len(l) != 1 || l[0].State != workerruntime.StateStopped {
			t.Errorf("List after Stop returned %+v, want one stopped worker", l)
		}
		if s, err := b.rt.Exec(t.Context(), h, []string{opts.App, "version"}); err == nil {
			_ = s.Close()
			t.Error("Exec in a stopped worker succeeded")
		}
		// Logs and the workspace stay readable while stopped.
		if _, err := b.rt.Logs(t.Context(), h, 10); err != nil {
			t.Errorf("Logs of a stopped worker: %v", err)
		}
		if got := b.export(t, h)["notes/kept.txt"]; got != "survives stop and start\n" {
			t.Errorf("stopped worker's workspace has notes/kept.txt = %q", got)
		}
		if err := b.rt.Stop(t.Context(), h, time.Second); err != nil {
			t.Errorf("Stop of a stopped worker: %v", err)
		}
		if err := b.rt.Start(t.Context(), h); err != nil {
			t.Fatalf("Start: %v", err)
		}
		b.wantBack(t, h, "after Start", "notes/kept.txt", "survives stop and start\n")
	})

	t.Run("StopEndsLiveSessions", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		s, err := b.rt.Exec(t.Context(), h, []string{b.probe(t, h), "sleep"})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		defer s.Close()
		line := make([]byte, len("sleeping\n"))
		if _, err := io.ReadFull(s, line); err != nil {
			t.Fatalf("reading the probe's first line: %v", err)
		}
		if err := b.rt.Stop(t.Context(), h, 2*time.Second); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.Copy(io.Discard, s)
			_, _ = s.Wait()
		}()
		select {
		case <-done:
		case <-time.After(runTimeout):
			t.Fatal("a session outlived Stop")
		}
	})

	// Alone in its container, idle looks for orphans less and less often:
	// 1, 3, 7, 15 and 31 s after its start, then every 30 s. A server's
	// announce brings back a look a second, for as long as it runs.
	t.Run("IdleEndsAnAnnouncedServersOrphans", func(t *testing.T) {
		if !opts.OwnInit {
			t.Skip("the runtime gives workers no PID 1 of their own")
		}
		b := setup(t)
		_, h := b.create(t)
		probe := b.probe(t, h)
		// Past idle's look at 15 s, its next is at 31 s: only the announce
		// makes it look within the deadline.
		time.Sleep(16 * time.Second)
		b.wantOrphanEnded(t, h, probe, 0)
	})

	t.Run("IdleLooksEverySecondWhileAServerRuns", func(t *testing.T) {
		if !opts.OwnInit {
			t.Skip("the runtime gives workers no PID 1 of their own")
		}
		b := setup(t)
		_, h := b.create(t)
		// The "server" runs 20 s after its announce: had idle gone back to
		// looking less often meanwhile (after 1, 2, 4, 8, 16 s), its orphan
		// would live until the look 31 s after the announce.
		b.wantOrphanEnded(t, h, b.probe(t, h), 20)
	})

	t.Run("ResumeKeepsTheWorkspace", func(t *testing.T) {
		b := setup(t)
		journey, h := b.create(t)
		b.writeFile(t, h, "resume.txt", "still here\n")
		if err := b.rt.Remove(t.Context(), h, workerruntime.RemoveOptions{}); err != nil {
			t.Fatalf("Remove without workspace: %v", err)
		}
		b.wantState(t, h, workerruntime.StateMissing)
		if l := b.listed(t, journey); len(l) != 0 {
			t.Errorf("List after Remove returned %+v, want nothing", l)
		}
		// What stop_worker's archive mode does for a stopped journey.
		if got := b.export(t, h)["resume.txt"]; got != "still here\n" {
			t.Errorf("workspace without a worker has resume.txt = %q", got)
		}
		h2 := b.createJourney(t, journey)
		if h2.Workspace != h.Workspace {
			t.Errorf("resumed worker has workspace %q, want the old %q", h2.Workspace, h.Workspace)
		}
		b.wantBack(t, h2, "after resume", "resume.txt", "still here\n")
	})

	t.Run("CreateReplacesAStaleWorker", func(t *testing.T) {
		b := setup(t)
		journey, h := b.create(t)
		b.writeFile(t, h, "kept.txt", "kept\n")
		h2 := b.createJourney(t, journey)
		b.wantState(t, h2, workerruntime.StateRunning)
		l := b.listed(t, journey)
		if len(l) != 1 || l[0].ID != h2.ID {
			t.Errorf("List after a second Create returned %+v, want only %s", l, h2.ID)
		}
		if got := b.export(t, h2)["kept.txt"]; got != "kept\n" {
			t.Errorf("the replaced worker's workspace lost kept.txt (%q)", got)
		}
	})

	t.Run("RemoveWithWorkspaceDeletesEverything", func(t *testing.T) {
		b := setup(t)
		journey, h := b.create(t)
		b.writeFile(t, h, "gone.txt", "soon gone\n")
		if err := b.rt.Remove(t.Context(), h, workerruntime.RemoveOptions{Workspace: true}); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		b.wantState(t, h, workerruntime.StateMissing)
		if l := b.listed(t, journey); len(l) != 0 {
			t.Errorf("List after Remove returned %+v", l)
		}
		if err := b.rt.Remove(t.Context(), h, workerruntime.RemoveOptions{Workspace: true}); err != nil {
			t.Errorf("second Remove: %v", err)
		}
		if err := b.rt.Remove(t.Context(), workerruntime.Handle{Workspace: h.Workspace}, workerruntime.RemoveOptions{Workspace: true}); err != nil {
			t.Errorf("Remove of a workspace-only handle: %v", err)
		}
		if _, err := b.rt.Logs(t.Context(), h, 10); !errors.Is(err, workerruntime.ErrNotFound) {
			t.Errorf("Logs of a removed worker: %v, want ErrNotFound", err)
		}
		if err := b.rt.ExportWorkspace(t.Context(), h, io.Discard); !errors.Is(err, workerruntime.ErrNotFound) {
			t.Errorf("ExportWorkspace of a removed workspace: %v, want ErrNotFound", err)
		}
		if s, err := b.rt.Exec(t.Context(), h, []string{opts.App, "version"}); !errors.Is(err, workerruntime.ErrNotFound) {
			if s != nil {
				_ = s.Close()
			}
			t.Errorf("Exec in a removed worker: %v, want ErrNotFound", err)
		}
		if err := b.rt.Start(t.Context(), h); !errors.Is(err, workerruntime.ErrNotFound) {
			t.Errorf("Start of a removed worker: %v, want ErrNotFound", err)
		}
		if err := b.rt.Stop(t.Context(), h, time.Second); !errors.Is(err, workerruntime.ErrNotFound) {
			t.Errorf("Stop of a removed worker: %v, want ErrNotFound", err)
		}
		// The journey can start over, with an empty workspace.
		h2 := b.createJourney(t, journey)
		if _, ok := b.export(t, h2)["gone.txt"]; ok {
			t.Error("a new worker after Remove with workspace still has gone.txt")
		}
	})

	// Two stops of one journey at once (the orchestrator's release and a
	// user's stop_worker, which the marketplace does not serialize, so
	// that a stop can end an action): both succeed, and the one that asked
	// for the workspace to go removes it.
	t.Run("RemovesAtOnceBothSucceed", func(t *testing.T) {
		b := setup(t)
		journey, h := b.create(t)
		errs := make(chan error, 2)
		for _, workspace := range []bool{false, true} {
			go func() { errs <- b.rt.Remove(t.Context(), h, workerruntime.RemoveOptions{Workspace: workspace}) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("Remove: %v", err)
			}
		}
		b.wantState(t, h, workerruntime.StateMissing)
		if l := b.listed(t, journey); len(l) != 0 {
			t.Errorf("List after the removes returned %+v", l)
		}
		if err := b.rt.ExportWorkspace(t.Context(), h, io.Discard); !errors.Is(err, workerruntime.ErrNotFound) {
			t.Errorf("ExportWorkspace after the removes: %v, want ErrNotFound (the workspace gone)", err)
		}
	})

	t.Run("SeedWorkspaceUnpacksATar", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		uid, gid := os.Getuid(), os.Getgid()
		for _, e := range []struct {
			name, body string
			typ        byte
			mode       int64
		}{
			{"src/", "", tar.TypeDir, 0o755},
			{"src/main.go", "package main\n", tar.TypeReg, 0o644},
			{"run.sh", "#!/bin/sh\n", tar.TypeReg, 0o755},
			{"src/link", "main.go", tar.TypeSymlink, 0o777},
		} {
			hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: uid, Gid: gid, Size: int64(len(e.body))}
			if e.typ == tar.TypeSymlink {
				hdr.Linkname, hdr.Size = e.body, 0
			}
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
			if e.typ == tar.TypeReg {
				_, _ = tw.Write([]byte(e.body))
			}
		}
		_ = tw.Close()
		if err := b.rt.SeedWorkspace(t.Context(), h, &buf); err != nil {
			t.Fatalf("SeedWorkspace: %v", err)
		}
		files := b.export(t, h)
		if files["src/main.go"] != "package main\n" || files["run.sh"] != "#!/bin/sh\n" {
			t.Errorf("the seeded workspace holds %v", files)
		}
		// The worker reads what was seeded, as its own user.
		if out, code := b.run(t, h, nil, b.probe(t, h), "read", "src/main.go"); code != 0 || string(out) != "package main\n" {
			t.Errorf("reading a seeded file in the worker: exit %d, %q", code, out)
		}
	})

	t.Run("WorkspacesAreSeparate", func(t *testing.T) {
		b := setup(t)
		_, ha := b.create(t)
		_, hb := b.create(t)
		if ha.Workspace == hb.Workspace {
			t.Fatalf("two journeys share workspace %q", ha.Workspace)
		}
		b.writeFile(t, ha, "a-only.txt", "a\n")
		if _, ok := b.export(t, hb)["a-only.txt"]; ok {
			t.Error("a file written in journey A appears in journey B's workspace")
		}
		if got := b.export(t, ha)["a-only.txt"]; got != "a\n" {
			t.Errorf("journey A's workspace has a-only.txt = %q", got)
		}
	})

	t.Run("Logs", func(t *testing.T) {
		b := setup(t)
		_, h := b.create(t)
		if _, code := b.run(t, h, nil, b.probe(t, h), "stderr", "a log line"); code != 0 {
			t.Fatalf("probe stderr exited %d", code)
		}
		for _, tail := range []int{0, 1, 100} {
			if _, err := b.rt.Logs(t.Context(), h, tail); err != nil {
				t.Errorf("Logs(tail %d): %v", tail, err)
			}
		}
		if _, err := b.rt.Logs(t.Context(), workerruntime.Handle{ID: "no-such-worker-" + uuid.NewString()}, 10); !errors.Is(err, workerruntime.ErrNotFound) {
			t.Errorf("Logs of an unknown worker: %v, want ErrNotFound", err)
		}
	})

	t.Run("RefusesUnsafeSpecs", func(t *testing.T) {
		b := setup(t)
		for name, mutate := range map[string]func(*workerruntime.Spec){
			"uid 0":             func(s *workerruntime.Spec) { s.User = "0" },
			"uid 0 with gid":    func(s *workerruntime.Spec) { s.User = "0:65532" },
			"root":              func(s *workerruntime.Spec) { s.User = "root" },
			"root:root":         func(s *workerruntime.Spec) { s.User = "root:root" },
			"host network":      func(s *workerruntime.Spec) { s.Network = "host" },
			"container net":     func(s *workerruntime.Spec) { s.Network = "container:x" },
			"path in journey":   func(s *workerruntime.Spec) { s.Journey = "../" + s.Journey },
			"empty journey":     func(s *workerruntime.Spec) { s.Journey = "" },
			"journey label":     func(s *workerruntime.Spec) { s.Labels = map[string]string{workerruntime.LabelJourney: "spoofed"} },
			"negative memory":   func(s *workerruntime.Spec) { s.MemoryBytes = -1 },
			"spaces in journey": func(s *workerruntime.Spec) { s.Journey = "a b" },
		} {
			journey := uuid.NewString()
			spec := b.spec(journey)
			mutate(&spec)
			h, err := b.rt.Create(t.Context(), spec)
			if err == nil {
				b.cleanupHandle(t, h)
				t.Errorf("%s: Create accepted %+v", name, spec)
			}
			if l := b.listed(t, journey); len(l) != 0 {
				t.Errorf("%s: a refused Create left %+v", name, l)
			}
		}
	})
}

// bundle is one case's runtime and labels.
type bundle struct {
	rt     workerruntime.Runtime
	opts   Options
	labels map[string]string
}

func (b *bundle) spec(journey string) workerruntime.Spec {
	return workerruntime.Spec{
		Journey:        journey,
		Worker:         testWorker,
		Image:          b.opts.Image,
		Cmd:            b.opts.Cmd,
		User:           testUser,
		Network:        "none",
		ReadonlyRootfs: true,
		CPUs:           0.5,
		MemoryBytes:    256 << 20,
		PIDs:           128,
		Labels:         maps.Clone(b.labels),
		OCIRuntime:     b.opts.OCIRuntime,
	}
}

// create creates a worker for a new journey.
func (b *bundle) create(t *testing.T) (string, workerruntime.Handle) {
	t.Helper()
	journey := uuid.NewString()
	return journey, b.createJourney(t, journey)
}

func (b *bundle) createJourney(t *testing.T, journey string) workerruntime.Handle {
	t.Helper()
	h, err := b.rt.Create(t.Context(), b.spec(journey))
	if err != nil {
		t.Fatalf("Create(%s): %v", journey, err)
	}
	b.cleanupHandle(t, h)
	return h
}

func (b *bundle) cleanupHandle(t *testing.T, h workerruntime.Handle) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		if err := b.rt.Remove(ctx, h, workerruntime.RemoveOptions{Workspace: true}); err != nil {
			t.Errorf("cleanup: removing %+v: %v", h, err)
		}
	})
}

// sweep removes every worker with the case's labels.
func (b *bundle) sweep(t *testing.T) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	l, err := b.rt.List(ctx, b.labels)
	if err != nil {
		t.Errorf("cleanup: listing leftovers: %v", err)
		return
	}
	for _, w := range l {
		t.Logf("cleanup: removing leftover worker %+v", w)
		if err := b.rt.Remove(ctx, w.Handle, workerruntime.RemoveOptions{Workspace: true}); err != nil {
			t.Errorf("cleanup: removing %+v: %v", w.Handle, err)
		}
	}
}

func (b *bundle) listed(t *testing.T, journey string) []workerruntime.Listed {
	t.Helper()
	filter := maps.Clone(b.labels)
	filter[workerruntime.LabelJourney] = journey
	l, err := b.rt.List(t.Context(), filter)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, w := range l {
		if w.Journey != journey {
			t.Errorf("List(%v) returned journey %s", filter, w.Journey)
		}
	}
	return l
}

func (b *bundle) wantState(t *testing.T, h workerruntime.Handle, want workerruntime.State) {
	t.Helper()
	got, err := b.rt.State(t.Context(), h)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	if got != want {
		t.Fatalf("State = %s, want %s", got, want)
	}
}

func (b *bundle) probe(t *testing.T, h workerruntime.Handle) string {
	t.Helper()
	return b.opts.Probe(t, b.rt, h)
}

// run execs argv with stdin and returns its stdout and exit code.
func (b *bundle) run(t *testing.T, h workerruntime.Handle, stdin []byte, argv ...string) ([]byte, int) {
	t.Helper()
	s, err := b.rt.Exec(t.Context(), h, argv)
	if err != nil {
		t.Fatalf("Exec(%q): %v", argv, err)
	}
	defer s.Close()
	type result struct {
		out  []byte
		code int
		err  error
	}
	done := make(chan result, 1)
	writeErr := make(chan error, 1)
	go func() {
		_, err := s.Write(stdin)
		if cerr := s.CloseWrite(); err == nil {
			err = cerr
		}
		writeErr <- err
	}()
	go func() {
		out, err := io.ReadAll(s)
		if err != nil {
			done <- result{err: err}
			return
		}
		code, err := s.Wait()
		done <- result{out: out, code: code, err: err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Exec(%q): %v", argv, r.err)
		}
		if err := <-writeErr; err != nil && len(stdin) > 0 {
			t.Fatalf("Exec(%q): writing stdin: %v", argv, err)
		}
		return r.out, r.code
	case <-time.After(runTimeout):
		t.Fatalf("Exec(%q): no result after %s", argv, runTimeout)
		return nil, 0
	}
}

// wantOrphanEnded runs a probe that announces itself to PID 1 as a server
// does, leaves a setsid orphan and exits after hold seconds, and checks
// that PID 1 ends the orphan within 3 s of the probe's exit.
func (b *bundle) wantOrphanEnded(t *testing.T, h workerruntime.Handle, probe string, hold int) {
	t.Helper()
	out, code := b.run(t, h, nil, probe, "orphan", strconv.Itoa(hold))
	pid := strings.TrimSpace(string(out))
	if code != 0 || pid == "" {
		t.Fatalf("probe orphan: exit %d, %q", code, out)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		out, code := b.run(t, h, nil, probe, "alive", pid)
		if code != 0 {
			t.Fatalf("probe alive: exit %d, %q", code, out)
		}
		if strings.TrimSpace(string(out)) == "gone" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the orphan %s (re-parented to PID 1) still runs 3 s after its server exited", pid)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// wantBack checks that a worker brought back (started again, or created
// again for its journey) runs, still holds the file name with data in its
// workspace, and runs a command: what its journey needs to go on. how says
// how it came back, for the messages.
func (b *bundle) wantBack(t *testing.T, h workerruntime.Handle, how, name, data string) {
	t.Helper()
	b.wantState(t, h, workerruntime.StateRunning)
	if got := b.export(t, h)[name]; got != data {
		t.Errorf("%s, %s = %q, want %q", how, name, got, data)
	}
	if _, code := b.run(t, h, nil, b.opts.App, "version"); code != 0 {
		t.Errorf("%s, exec exited %d", how, code)
	}
}

// writeFile writes a file into the workspace through the probe, as the
// worker's user.
func (b *bundle) writeFile(t *testing.T, h workerruntime.Handle, name, data string) {
	t.Helper()
	if _, code := b.run(t, h, []byte(data), b.probe(t, h), "write", workerruntime.WorkspacePath+"/"+name); code != 0 {
		t.Fatalf("writing %s: probe exited %d", name, code)
	}
}

// export returns the workspace's regular files by name (and directories,
// with a trailing slash, mapped to "").
func (b *bundle) export(t *testing.T, h workerruntime.Handle) map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if err := b.rt.ExportWorkspace(t.Context(), h, &buf); err != nil {
		t.Fatalf("ExportWorkspace: %v", err)
	}
	files := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("ExportWorkspace wrote a bad tar: %v", err)
		}
		if strings.HasPrefix(hdr.Name, "/") || strings.HasPrefix(hdr.Name, "./") || strings.HasPrefix(hdr.Name, "workspace/") || slices.Contains(strings.Split(hdr.Name, "/"), "..") {
			t.Errorf("ExportWorkspace entry %q is not relative to the workspace", hdr.Name)
		}
		if hdr.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("reading %s from the export: %v", hdr.Name, err)
			}
			files[hdr.Name] = string(data)
		} else {
			files[hdr.Name] = ""
		}
	}
	return files
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
