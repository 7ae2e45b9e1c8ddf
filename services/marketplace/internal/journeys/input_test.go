package journeys_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
)

// A client's bad input is the client's error, said briefly, before it
// costs anything: a journey id that cannot be one never reaches Postgres
// (a NUL byte would be its error, reported as internal), a workspace_diff
// narrowed to more paths than a diff filters by is refused before the
// journey is locked, and a spawn on an isolation level that is not one is
// refused before its source is fetched.
func TestBadInputIsTheClientsError(t *testing.T) {
	t.Parallel()
	b := setupQuota(t, 0, 0)
	b.mustSpawn(t, "alice", "j", "")
	ctx := context.Background()
	long := strings.Repeat("x", 1<<20)
	manyPaths := make([]string, journeys.MaxDiffPaths+1)
	for i := range manyPaths {
		manyPaths[i] = fmt.Sprintf("p%d", i)
	}
	for name, call := range map[string]func() error{
		"state of a NUL id": func() error { _, err := b.mgr.State(ctx, "alice", "a\x00b"); return err },
		"action on a NUL id": func() error {
			_, err := b.mgr.Execute(ctx, "alice", "a\x00b", []byte(`{"type":"read","target":"x"}`))
			return err
		},
		"diff of a long id": func() error { _, err := b.mgr.Diff(ctx, "alice", journeys.DiffRequest{JourneyID: long}); return err },
		"diff of too many paths": func() error {
			_, err := b.mgr.Diff(ctx, "alice", journeys.DiffRequest{JourneyID: "j", Paths: manyPaths})
			return err
		},
		"diff of a NUL path": func() error {
			_, err := b.mgr.Diff(ctx, "alice", journeys.DiffRequest{JourneyID: "j", Paths: []string{"a\x00"}})
			return err
		},
		"spawn on a bogus level": func() error {
			_, err := b.mgr.Spawn(ctx, "alice", journeys.SpawnRequest{WorkerID: "filesystem_research_v1", JourneyID: "k", IsolationLevel: long})
			return err
		},
		"spawn of a long worker": func() error {
			_, err := b.mgr.Spawn(ctx, "alice", journeys.SpawnRequest{WorkerID: long, JourneyID: "k"})
			return err
		},
	} {
		err := call()
		e, ok := journeys.AsError(err)
		if !ok || (e.Code != journeys.CodeInvalidArgument && e.Code != journeys.CodeNotFound) || len(e.Message) > 1024 {
			t.Errorf("%s: %.200v, want invalid_argument or not_found in under 1 KiB", name, err)
		}
	}
	if out, err := b.mgr.Audit(ctx, "alice", meshapi.JourneyAuditIn{JourneyID: "j"}); err != nil || len(out.Entries) != 0 {
		t.Errorf("refused input left audit rows: %+v (%v)", out.Entries, err)
	}
}
