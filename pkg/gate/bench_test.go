package gate_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// benchEvaluate times each Evaluate call and reports the median and 99th
// percentile beside the mean, since the goals are stated as a p50.
func benchEvaluate(b *testing.B, def *meshtype.Definition, actions []meshtype.Action) {
	b.Helper()
	g := mustCompile(b, def)
	state := meshtype.JourneyState{ActionCount: 3, CostUSD: 0.25}
	// A classic b.N loop, not b.Loop: the sample buffer is sized from b.N.
	samples := make([]time.Duration, 0, min(b.N, 1<<20))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		a := &actions[i%len(actions)]
		start := time.Now()
		vs := g.Evaluate(a, state)
		d := time.Since(start)
		if len(samples) < cap(samples) {
			samples = append(samples, d)
		}
		if vs != nil {
			b.Fatalf("unexpected violations: %+v", vs)
		}
	}
	b.StopTimer()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
}

// benchActions is a mix of allowed actions of the kinds the gate checks most.
var benchActions = []meshtype.Action{
	{Type: "read", Target: "README.md"},
	{Type: "write", Target: "src/pkg/handler.go", Content: "package pkg\n\nfunc Handle() {}\n"},
	{Type: "list", Target: "docs"},
	{Type: "search", Target: "src", Pattern: "func [A-Z]"},
	{Type: "exec", Command: []string{"go", "test", "./..."}},
}

// BenchmarkEvaluateBuiltins: tools, readonly, size, path safety, allowed and
// denied globs, commands, max_actions, max_cost_usd. Goal: p50 under 1 µs.
func BenchmarkEvaluateBuiltins(b *testing.B) {
	benchEvaluate(b, writerDef(), benchActions)
}

// BenchmarkEvaluateBuiltinsAndSixRules adds six CEL rules (membership, bool,
// size, startsWith, exists(), regex). Goal: p50 under 10 µs.
func BenchmarkEvaluateBuiltinsAndSixRules(b *testing.B) {
	benchEvaluate(b, ruleDef(sixRules...), benchActions)
}

// BenchmarkEvaluateResult checks an allowed change of 50 files against every
// built-in result check and the result rules of the tests.
func BenchmarkEvaluateResult(b *testing.B) {
	def := resultDef(resultRules...)
	def.Result.MaxChangedFiles = 100
	g := mustCompile(b, def)
	files := make([]meshtype.ChangedFile, 50)
	for i := range files {
		files[i] = modified("src/pkg/file" + strconv.Itoa(i) + ".go")
	}
	files[7] = renamed("src/old.go", "src/new.go")
	c := summary(files...)
	b.ReportAllocs()
	for b.Loop() {
		if vs := g.EvaluateResult(c); vs != nil {
			b.Fatalf("unexpected violations: %+v", vs)
		}
	}
}
