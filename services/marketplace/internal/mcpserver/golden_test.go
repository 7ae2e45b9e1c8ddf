package mcpserver_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/meshwork/meshwork/pkg/mcpgolden"
	"github.com/meshwork/meshwork/workers"
)

// The marketplace's MCP surface, against its golden transcript.
func TestToolsTranscript(t *testing.T) {
	t.Parallel()
	mcpgolden.Tools(t, setup(t).client(t, aliceToken), "testdata/tools.txtar")
}

// Typical calls, against their golden transcript: the catalog, a spawn, a
// write, a read, an action the gate refuses, the work as a diff, the
// journey's state, a stop, and a call on a journey that does not exist.
func TestCallsTranscript(t *testing.T) {
	t.Parallel()
	cs := setup(t).client(t, aliceToken)
	write := map[string]any{"type": "write", "target": "docs/today.md", "content": "hello meshwork\n"}
	mcpgolden.Calls(t, cs, "testdata/calls.txtar", []mcpgolden.Call{
		{Name: "list_workers", Tool: "list_workers", Args: map[string]any{}},
		{Name: "spawn_worker", Tool: "spawn_worker", Args: map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "notes"}},
		{Name: "execute_in_worker-write", Tool: "execute_in_worker", Args: execArgs("notes", write)},
		{Name: "execute_in_worker-read", Tool: "execute_in_worker", Args: execArgs("notes", map[string]any{"type": "read", "target": "docs/today.md"})},
		{Name: "execute_in_worker-refused", Tool: "execute_in_worker", Args: execArgs("notes", map[string]any{"type": "read", "target": "../../etc/passwd"})},
		{Name: "workspace_diff", Tool: "workspace_diff", Args: map[string]any{"journey_id": "notes"}},
		{Name: "get_worker_state", Tool: "get_worker_state", Args: map[string]any{"journey_id": "notes"}},
		{Name: "stop_worker", Tool: "stop_worker", Args: map[string]any{"journey_id": "notes"}},
		{Name: "execute_in_worker-unknown-journey", Tool: "execute_in_worker", Args: execArgs("nobody", write)},
	})
}

// What describe_worker returns for every worker of the catalog is what its
// advertised output schema allows: a client that validates results (a
// duration is text, a size a number) accepts it.
func TestDescribeWorkerMatchesItsSchema(t *testing.T) {
	t.Parallel()
	cs := setup(t).client(t, aliceToken)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var schema *jsonschema.Schema
	for _, tool := range tools.Tools {
		if tool.Name == "describe_worker" {
			raw, err := json.Marshal(tool.OutputSchema)
			if err != nil {
				t.Fatal(err)
			}
			schema = new(jsonschema.Schema)
			if err := json.Unmarshal(raw, schema); err != nil {
				t.Fatal(err)
			}
		}
	}
	if schema == nil {
		t.Fatal("describe_worker is not listed")
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := workers.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range catalog.Entries() {
		if e.Definition.Abstract {
			continue
		}
		res, err := cs.CallTool(context.Background(), toolParams("describe_worker", map[string]any{"worker_id": e.Definition.ID}))
		if err != nil || res.IsError {
			t.Fatalf("describe_worker %s: %v", e.Definition.ID, err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var instance any
		if err := json.Unmarshal(raw, &instance); err != nil {
			t.Fatal(err)
		}
		if err := resolved.Validate(instance); err != nil {
			t.Errorf("describe_worker %s: the result does not match the output schema: %v", e.Definition.ID, err)
		}
	}
}
