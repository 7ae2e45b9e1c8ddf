package mcpserver_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// BenchmarkScale spawns MESHWORK_SCALE_N journeys (default 40; `make
// bench/scale N=500`), each followed by one action (a 1 KB write), in
// rounds of 20 alternately one after another from one client and from 20
// clients at once. It then leaves them idle (their channels closed, as after
// channel_idle) and reports, against the same figures with one live
// journey before: host memory per idle journey (the host's used memory
// before and after, over the count: workers, the engine's shims, the
// marketplace), the marketplace's RSS (it runs in the test process), its
// CPU and the host's while idle, list_journeys and a 1 KB read on one journey, and the
// time a restarted marketplace takes to reconcile them. The 1 KB read is
// also measured in turns with the same read on a second marketplace that
// holds one journey, on the same host: a ratio the host's noise does not
// move.
func BenchmarkScale(b *testing.B) {
	n := 40
	if v := os.Getenv("MESHWORK_SCALE_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 40 {
			b.Fatalf("MESHWORK_SCALE_N=%q: want a count of at least 40", v)
		}
	}
	const clients = 20
	for range b.N {
		bb := setupWith(b, &bundle{maxPerCaller: n + 1, maxTotal: n + 1})
		ctx := context.Background()
		one := bb.client(b, aliceToken)
		must(b, one, "spawn_worker", map[string]any{"worker_id": poolWorker, "journey_id": "one"})
		kb := strings.Repeat("k", 1024)
		must(b, one, "execute_in_worker", execArgs("one", map[string]any{"type": "write", "target": "1k.txt", "content": kb}))
		// The control: a second marketplace, with a database of its own,
		// that only ever holds one journey, on the same host and engine
		// and in the same process. Its reads alternate with the first
		// marketplace's, so whatever the host does at that moment both see
		// alike, and their ratio is what the first marketplace's many
		// journeys cost its actions beyond what they cost the host and
		// this process. It is there before and after: its journey counts
		// in both memory readings, and its channel closes with the others.
		control := setupWith(b, &bundle{})
		ctl := control.client(b, aliceToken)
		must(b, ctl, "spawn_worker", map[string]any{"worker_id": poolWorker, "journey_id": "control"})
		must(b, ctl, "execute_in_worker", execArgs("control", map[string]any{"type": "write", "target": "1k.txt", "content": kb}))
		// readP50 is the p50 of 200 reads on journey "one", and of 200 on
		// the control's journey, taken in turns, each first in every other
		// turn: what one read leaves behind (the engine's or the
		// collector's work) falls on both alike.
		readP50 := func() (time.Duration, time.Duration) {
			var ds, cs []time.Duration
			read := func(client *mcp.ClientSession, journey string, into *[]time.Duration) {
				start := time.Now()
				must(b, client, "execute_in_worker", execArgs(journey, map[string]any{"type": "read", "target": "1k.txt"}))
				*into = append(*into, time.Since(start))
			}
			for i := range 200 {
				if i%2 == 0 {
					read(one, "one", &ds)
					read(ctl, "control", &cs)
				} else {
					read(ctl, "control", &cs)
					read(one, "one", &ds)
				}
			}
			return percentile(ds, 50), percentile(cs, 50)
		}
		listP50 := func() time.Duration {
			var ds []time.Duration
			for range 20 {
				start := time.Now()
				must(b, one, "list_journeys", map[string]any{})
				ds = append(ds, time.Since(start))
			}
			return percentile(ds, 50)
		}
		// Measured on a settled host, as the figures after are: a
		// container's start keeps the engine busy for a moment after.
		time.Sleep(3 * time.Second)
		hostIdleBefore := readHostCPU(b)
		time.Sleep(3 * time.Second)
		hostIdleBefore = readHostCPU(b).since(hostIdleBefore)
		readBefore, controlBefore := readP50()
		listBefore, pgBefore := listP50(), pgP50(b, bb)
		memBefore := hostUsedMiB(b)

		spawn := func(cs *mcp.ClientSession, i int) error {
			id := fmt.Sprintf("scale-%d", i)
			for _, c := range []struct {
				tool string
				args map[string]any
			}{
				{"spawn_worker", map[string]any{"worker_id": poolWorker, "journey_id": id}},
				{"execute_in_worker", execArgs(id, map[string]any{"type": "write", "target": "1k.txt", "content": kb})},
			} {
				res, err := cs.CallTool(ctx, toolParams(c.tool, c.args))
				if err != nil || res.IsError {
					return fmt.Errorf("%s %s: %w (result %v)", c.tool, id, err, res)
				}
			}
			return nil
		}
		// In rounds of 20 journeys, alternately from one client and from
		// 20 at once, so that both see the host as full as the other.
		concurrentClients := make([]*mcp.ClientSession, clients)
		for c := range concurrentClients {
			concurrentClients[c] = bb.client(b, aliceToken)
		}
		var seqTime, concTime time.Duration
		var seqN, concN int
		// How many of the host's cores were busy in each mode: a spawn is
		// mostly the engine's work, so at the same engine work per spawn
		// 20 clients can be at most (cores / cores busy with one client)
		// times as fast as one.
		var seqCPU, concCPU hostCPU
		wallStart := time.Now()
		for round, first := 0, 0; first < n; round, first = round+1, first+clients {
			last := min(first+clients, n)
			start, cpuStart := time.Now(), readHostCPU(b)
			if round%2 == 0 {
				for i := first; i < last; i++ {
					if err := spawn(one, i); err != nil {
						b.Fatal(err)
					}
				}
				seqTime, seqN = seqTime+time.Since(start), seqN+last-first
				seqCPU = seqCPU.add(readHostCPU(b).since(cpuStart))
				continue
			}
			errs := make(chan error, clients)
			var wg sync.WaitGroup
			for i := first; i < last; i++ {
				wg.Go(func() {
					if err := spawn(concurrentClients[i-first], i); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			concTime, concN = concTime+time.Since(start), concN+last-first
			concCPU = concCPU.add(readHostCPU(b).since(cpuStart))
		}
		total := time.Since(wallStart)

		// Idle: every channel closed, as channel_idle does.
		bb.mgr.CloseIdleChannels(ctx, time.Now())
		control.mgr.CloseIdleChannels(ctx, time.Now())
		time.Sleep(3 * time.Second)
		memAfter := hostUsedMiB(b)
		// Idle as it stays: once its server has left, each worker's init
		// looks for orphans within a second, then 1, 2, 4, 8 and 16 s
		// apart, then every 30 s (proctree.Idle): its last look before
		// that is at most 32 s after the channels closed, so the 10 s
		// from 35 s on are a steady state.
		time.Sleep(32 * time.Second)
		cpuBefore, hostIdle := processCPU(), readHostCPU(b)
		time.Sleep(10 * time.Second)
		idleCPU := (processCPU() - cpuBefore).Seconds() / 10 * 100
		hostIdle = readHostCPU(b).since(hostIdle)
		must(b, one, "execute_in_worker", execArgs("one", map[string]any{"type": "read", "target": "1k.txt"})) // reopens its channel
		must(b, ctl, "execute_in_worker", execArgs("control", map[string]any{"type": "read", "target": "1k.txt"}))
		readAfter, controlAfter := readP50()
		listAfter, pgAfter := listP50(), pgP50(b, bb)

		start := time.Now()
		bb.start(b) // a restarted marketplace: a new manager, reconciling
		reconcile := time.Since(start)

		b.ReportMetric(float64(n), "journeys")
		b.ReportMetric(total.Seconds(), "spawn-wall-s")
		if concN > 0 {
			b.ReportMetric((float64(concN)/concTime.Seconds())/(float64(seqN)/seqTime.Seconds()), "20-clients/1-client-spawn-rate")
			b.ReportMetric(seqCPU.coresBusy(), "1-client-cores-busy")
			b.ReportMetric(concCPU.coresBusy(), "20-clients-cores-busy")
		}
		b.ReportMetric((memAfter-memBefore)/float64(n), "host-MiB/idle-journey")
		b.ReportMetric(processRSSMiB(b), "marketplace-RSS-MiB")
		b.ReportMetric(idleCPU, "marketplace-idle-cpu-%")
		b.ReportMetric(millis(listAfter), "list-journeys-p50-ms")
		b.ReportMetric(millis(listBefore), "list-journeys-one-live-p50-ms")
		b.ReportMetric(millis(readAfter), "read1k-p50-ms")
		b.ReportMetric(float64(readAfter)/float64(readBefore), "read1k/one-live")
		// The same read against the control's, in turns on the same host:
		// before (both with one journey: how alike the two are) and after.
		b.ReportMetric(float64(readBefore)/float64(controlBefore), "read1k/control-one-live")
		b.ReportMetric(float64(readAfter)/float64(controlAfter), "read1k/control")
		// What the host alone costs: its cores busy while every journey
		// idles, against one live journey, and a Postgres round trip
		// (SELECT 1), which no Meshwork code is part of, against the same.
		b.ReportMetric(hostIdle.coresBusy(), "host-idle-cores-busy")
		b.ReportMetric(hostIdleBefore.coresBusy(), "host-idle-cores-busy-one-live")
		b.ReportMetric(float64(pgAfter)/float64(pgBefore), "postgres-round-trip/one-live")
		b.ReportMetric(reconcile.Seconds(), "restart-reconcile-s")
	}
}

// pgP50 is the p50 of 200 round trips of SELECT 1 to the marketplace's
// database.
func pgP50(b *testing.B, bb *bundle) time.Duration {
	b.Helper()
	ds := make([]time.Duration, 0, 200)
	for range 200 {
		start := time.Now()
		if _, err := bb.pool.Exec(context.Background(), "SELECT 1"); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	return percentile(ds, 50)
}

// hostUsedMiB is the host's used memory: MemTotal less MemAvailable.
func hostUsedMiB(b *testing.B) float64 {
	b.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	kb := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 {
			v, _ := strconv.ParseFloat(fields[1], 64)
			kb[strings.TrimSuffix(fields[0], ":")] = v
		}
	}
	return (kb["MemTotal"] - kb["MemAvailable"]) / 1024
}

// hostCPU is the host's CPU time from /proc/stat, in clock ticks: busy
// (everything but idle, iowait and steal: another guest's) and total, over
// all cores.
type hostCPU struct{ busy, total, cores float64 }

func readHostCPU(b *testing.B) hostCPU {
	b.Helper()
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	var c hostCPU
	for line := range strings.Lines(string(raw)) {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case len(fields) > 5 && fields[0] == "cpu":
			for i, f := range fields[1:] {
				v, _ := strconv.ParseFloat(f, 64)
				if i >= 8 {
					break // guest time is counted in user time already
				}
				c.total += v
				if i != 3 && i != 4 && i != 7 { // idle, iowait, steal
					c.busy += v
				}
			}
		case strings.HasPrefix(fields[0], "cpu"):
			c.cores++
		}
	}
	return c
}

func (c hostCPU) since(start hostCPU) hostCPU {
	return hostCPU{busy: c.busy - start.busy, total: c.total - start.total, cores: c.cores}
}

func (c hostCPU) add(d hostCPU) hostCPU {
	return hostCPU{busy: c.busy + d.busy, total: c.total + d.total, cores: d.cores}
}

// coresBusy is how many cores were busy on average.
func (c hostCPU) coresBusy() float64 {
	if c.total == 0 {
		return 0
	}
	return c.busy / c.total * c.cores
}

// processRSSMiB is this process's resident memory.
func processRSSMiB(b *testing.B) float64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// insertJourneys records n active journeys of alice, as rows only (no
// worker): what list_journeys reads.
func insertJourneys(tb testing.TB, bb *bundle, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := range n {
		j, err := bb.store.CreateJourney(ctx, store.Journey{
			Caller: "alice", ID: fmt.Sprintf("listed-%d", i), WorkerID: poolWorker, DefinitionHash: "h", IsolationLevel: "container",
		}, store.Quota{})
		if err != nil {
			tb.Fatal(err)
		}
		if ok, err := bb.store.SetRunning(ctx, j.UID, fmt.Sprintf("%064d", i), "meshwork-ws-"+j.UID.String()); err != nil || !ok {
			tb.Fatal(ok, err)
		}
	}
}

// list_journeys pages through many journeys, newest first, each once; a
// cursor it did not make is refused.
func TestListJourneysPages(t *testing.T) {
	t.Parallel()
	bb := setup(t)
	const n = 250
	insertJourneys(t, bb, n)
	// Ties on the creation time are ordered by id: give some journeys one.
	if _, err := bb.pool.Exec(context.Background(), `UPDATE journeys SET created_at = '2026-01-01T00:00:00Z' WHERE id LIKE 'listed-1%'`); err != nil {
		t.Fatal(err)
	}
	cs := bb.client(t, aliceToken)
	seen := map[string]bool{}
	var order []string
	cursor, pages := "", 0
	for {
		args := map[string]any{"limit": 100}
		if cursor != "" {
			args["cursor"] = cursor
		}
		out := must(t, cs, "list_journeys", args)
		js, _ := out["journeys"].([]any)
		for _, j := range js {
			id := j.(map[string]any)["journey_id"].(string)
			if seen[id] {
				t.Fatalf("journey %s listed twice", id)
			}
			seen[id] = true
			order = append(order, id)
		}
		pages++
		next, _ := out["next_cursor"].(string)
		if next == "" {
			break
		}
		if len(js) != 100 {
			t.Fatalf("a page with a next page holds %d journeys, want 100", len(js))
		}
		cursor = next
	}
	if len(seen) != n || pages != 3 {
		t.Fatalf("%d journeys over %d pages, want %d over 3", len(seen), pages, n)
	}
	all := must(t, cs, "list_journeys", map[string]any{"limit": 500})
	if js, _ := all["journeys"].([]any); len(js) != n || all["next_cursor"] != nil {
		t.Fatalf("one page of 500 holds %d journeys (next %v), want all %d", len(js), all["next_cursor"], n)
	} else {
		for i, j := range js {
			if id := j.(map[string]any)["journey_id"]; id != order[i] {
				t.Fatalf("journey %d is %v on one page and %s over three", i, id, order[i])
			}
		}
	}
	if out := must(t, cs, "list_journeys", map[string]any{}); len(out["journeys"].([]any)) != 100 {
		t.Errorf("the default page holds %d journeys, want 100", len(out["journeys"].([]any)))
	}
	for _, args := range []map[string]any{
		{"cursor": "not-a-cursor"},
		{"cursor": "eyJ0IjoiMjAyNi0wMS0wMVQwMDowMDowMFoiLCJpZCI6Ii4uLyJ9"}, // {"t":...,"id":"../"}
		{"limit": 501},
		{"limit": -1},
	} {
		res := call(t, cs, "list_journeys", args)
		if e, _ := res.out["error"].(map[string]any); !res.isError || e["code"] != "invalid_argument" {
			t.Errorf("list_journeys %v: %+v, want invalid_argument", args, res)
		}
	}
}

// BenchmarkListJourneys times list_journeys over MCP HTTP for a caller
// with 500 journeys (rows only: listing reads no worker), one page of all
// of them and the default page.
func BenchmarkListJourneys(b *testing.B) {
	bb := setup(b)
	insertJourneys(b, bb, 500)
	cs := bb.client(b, aliceToken)
	var all, first []time.Duration
	for range b.N {
		start := time.Now()
		out := must(b, cs, "list_journeys", map[string]any{"limit": 500})
		all = append(all, time.Since(start))
		if js, _ := out["journeys"].([]any); len(js) != 500 {
			b.Fatalf("%d journeys listed, want 500", len(js))
		}
		start = time.Now()
		must(b, cs, "list_journeys", map[string]any{})
		first = append(first, time.Since(start))
	}
	b.ReportMetric(millis(percentile(all, 50)), "all-500-p50-ms")
	b.ReportMetric(millis(percentile(first, 50)), "first-page-p50-ms")
}
