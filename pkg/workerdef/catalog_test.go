package workerdef_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/workerdef"
)

const base = `id: base_v1
abstract: true
name: Base
kind: builtin
image: meshwork/worker:latest
tools: [read, list]
isolation:
  network: none
  resources: {cpus: 0.5, memory: 256Mi, pids: 64}
constraints:
  max_file_size: 1MB
  denied_paths: ["**/.env", ".git/**"]
  rules:
    - id: base_rule
      expression: "true"
`

func catalog(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, body := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(body)}
	}
	return fsys
}

func mustLoad(t *testing.T, files map[string]string) *workerdef.Catalog {
	t.Helper()
	c, err := workerdef.Load(catalog(files))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestExtendsDeepMerges(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{
		"base.yaml": base,
		"child.yaml": `id: child_v1
extends: base_v1
name: Child
tools: [read, write]
isolation:
  resources: {memory: 1Gi}
constraints:
  denied_paths: ["secrets/**"]
  readonly: true
`,
	})
	e, ok := c.Lookup("child_v1")
	if !ok {
		t.Fatal("child_v1 missing")
	}
	d := e.Definition
	if d.Abstract {
		t.Error("abstract was inherited from the base")
	}
	if d.Kind != meshtype.KindBuiltin || d.Image != "meshwork/worker:latest" {
		t.Errorf("base scalars not inherited: kind %q image %q", d.Kind, d.Image)
	}
	// Maps merge: memory from the child, cpus and pids from the base, the
	// workspace quota from the defaults.
	if want := (meshtype.Resources{CPUs: 0.5, Memory: 1 << 30, PIDs: 64, Workspace: 2 << 30, WorkspaceFiles: 200_000}); d.Isolation.Resources != want {
		t.Errorf("resources %+v, want %+v", d.Isolation.Resources, want)
	}
	// Lists replace.
	if !reflect.DeepEqual(d.Tools, []string{"read", "write"}) || !reflect.DeepEqual(d.Constraints.DeniedPaths, []string{"secrets/**"}) {
		t.Errorf("lists merged instead of replaced: tools %v denied %v", d.Tools, d.Constraints.DeniedPaths)
	}
	if d.Constraints.MaxFileSize != 1_000_000 || !d.Constraints.Readonly || len(d.Constraints.Rules) != 1 {
		t.Errorf("constraints %+v", d.Constraints)
	}
	// Defaults fill what neither wrote.
	if d.Isolation.Level != meshtype.IsolationContainer || d.Isolation.Runtime != "runc" || !d.Isolation.ReadonlyRootfs ||
		d.Isolation.User != "65532:65532" || d.Isolation.IdleTimeout.String() != "30m0s" {
		t.Errorf("defaults not applied: %+v", d.Isolation)
	}
	if got := len(c.Entries()); got != 1 {
		t.Errorf("Entries lists %d definitions, want 1 (the abstract base is not listed)", got)
	}
	if b, _ := c.Lookup("base_v1"); b == nil || !b.Definition.Abstract {
		t.Error("base_v1 should be loaded and abstract")
	}
	if len(e.Hash) != 64 || e.Gate == nil || e.File != "child.yaml" {
		t.Errorf("entry hash %q gate %v file %q", e.Hash, e.Gate, e.File)
	}
}

// A definition can override a base setting with false, and the hash moves
// with every change.
func TestHashTracksDefinition(t *testing.T) {
	t.Parallel()
	one := mustLoad(t, map[string]string{"base.yaml": base, "c.yaml": "id: c_v1\nextends: base_v1\nname: C\n"})
	two := mustLoad(t, map[string]string{"base.yaml": base, "c.yaml": "id: c_v1\nextends: base_v1\nname: C\nisolation: {readonly_rootfs: false}\n"})
	a, _ := one.Lookup("c_v1")
	b, _ := two.Lookup("c_v1")
	if b.Definition.Isolation.ReadonlyRootfs {
		t.Error("readonly_rootfs: false did not override the default")
	}
	if a.Hash == b.Hash {
		t.Error("different definitions share a hash")
	}
	again := mustLoad(t, map[string]string{"base.yaml": base, "c.yaml": "id: c_v1\nextends: base_v1\nname: C\n"})
	if c, _ := again.Lookup("c_v1"); c.Hash != a.Hash {
		t.Error("the same definition hashed differently")
	}
}

// A result block loads, merges over its base's like constraints do (maps
// merge, lists replace), and the entry's gate enforces it.
func TestResultBlock(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{
		"base.yaml": base + `result:
  max_changed_files: 50
  max_diff_bytes: 1MB
  denied_paths: [".github/**"]
`,
		"child.yaml": `id: child_v1
extends: base_v1
name: Child
result:
  max_changed_files: 2
  denied_paths: ["go.sum"]
  rules:
    - id: no_vendor
      expression: "!result.files.exists(f, f.path.startsWith('vendor/'))"
      messageExpression: "'vendored: ' + result.files.filter(f, f.path.startsWith('vendor/')).map(f, f.path).join(', ')"
`,
	})
	b, _ := c.Lookup("base_v1")
	e, ok := c.Lookup("child_v1")
	if !ok {
		t.Fatal("child_v1 missing")
	}
	want := meshtype.ResultConstraints{
		MaxChangedFiles: 2,
		MaxDiffBytes:    1_000_000,
		DeniedPaths:     []string{"go.sum"},
		Rules: []meshtype.Rule{{
			ID:                "no_vendor",
			Expression:        "!result.files.exists(f, f.path.startsWith('vendor/'))",
			MessageExpression: "'vendored: ' + result.files.filter(f, f.path.startsWith('vendor/')).map(f, f.path).join(', ')",
		}},
	}
	if !reflect.DeepEqual(e.Definition.Result, want) {
		t.Errorf("result %+v, want %+v", e.Definition.Result, want)
	}
	change := &meshtype.ChangeSummary{
		Files: []meshtype.ChangedFile{
			{Path: "go.sum", Status: meshtype.ChangeModified},
			{Path: ".github/ci.yml", Status: meshtype.ChangeModified}, // denied by the base only: the child's list replaced it
			{Path: "vendor/x.go", Status: meshtype.ChangeAdded},
		},
		DiffBytes: 2_000_000,
	}
	var got []string
	for _, v := range e.Gate.EvaluateResult(change) {
		got = append(got, v.ConstraintID+": "+v.Message)
	}
	wantVs := []string{
		"result.max_changed_files: the change touches 3 files; the limit is 2",
		"result.max_diff_bytes: the patch is 2000000 bytes; the limit is 1000000 bytes",
		`result.denied_paths: change to "go.sum" is refused: it matches denied path "go.sum"`,
		"no_vendor: vendored: vendor/x.go",
	}
	if !reflect.DeepEqual(got, wantVs) {
		t.Errorf("violations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantVs, "\n"))
	}
	if b.Hash == e.Hash {
		t.Error("base and child share a hash")
	}
	// A definition without a result block has an empty one, left out of the
	// JSON its hash is taken over, so the hashes of existing definitions stay.
	plain := mustLoad(t, map[string]string{"base.yaml": base})
	p, _ := plain.Lookup("base_v1")
	if !reflect.DeepEqual(p.Definition.Result, meshtype.ResultConstraints{}) {
		t.Errorf("no result block: got %+v", p.Definition.Result)
	}
	if js, err := json.Marshal(&p.Definition); err != nil || strings.Contains(string(js), `"result"`) {
		t.Errorf("no result block: JSON %s (%v) names a result", js, err)
	}
}

func TestLoadErrorsHavePositions(t *testing.T) {
	t.Parallel()
	ok := "id: ok_v1\nname: OK\nkind: builtin\nimage: x\ntools: [read]\n"
	tests := []struct {
		name  string
		files map[string]string
		want  string // one of the errors, exactly
	}{
		{"unknown field", map[string]string{"a.yaml": ok + "colour: blue\n"}, "a.yaml:6:1: unknown field \"colour\" (known: abstract, agent, constraints, description, extends, id, image, isolation, kind, mcp, name, pool, result, tools)"},
		{"unknown nested field with hint", map[string]string{"a.yaml": ok + "constraints:\n  maxFileSize: 1MB\n"}, "a.yaml:7:3: unknown field \"maxFileSize\" in constraints (did you mean \"max_file_size\"?)"},
		{"bad size unit", map[string]string{"a.yaml": ok + "constraints:\n  max_file_size: 1XB\n"}, "a.yaml:7:18: constraints.max_file_size: invalid size \"1XB\": unknown unit \"XB\" (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)"},
		{"negative size", map[string]string{"a.yaml": ok + "constraints:\n  max_file_size: -1MB\n"}, "a.yaml:7:18: constraints.max_file_size: invalid size \"-1MB\": want a number with an optional unit such as 10MB or 256Mi"},
		{"fractional bytes", map[string]string{"a.yaml": ok + "isolation:\n  resources: {memory: 1.5B}\n"}, "a.yaml:7:23: isolation.resources.memory: invalid size \"1.5B\": not a whole number of bytes"},
		{"bad duration", map[string]string{"a.yaml": ok + "isolation:\n  idle_timeout: 30 minutes\n"}, "a.yaml:7:17: isolation.idle_timeout: invalid duration \"30 minutes\": want a duration such as 30s, 5m or 1h30m"},
		{"negative duration", map[string]string{"a.yaml": ok + "isolation:\n  idle_timeout: -5m\n"}, "a.yaml:7:17: isolation.idle_timeout: invalid duration \"-5m\": must not be negative"},
		{"pool too big", map[string]string{"a.yaml": ok + "pool: {size: 65}\n"}, "a.yaml:6:14: pool.size must be from 0 to 64, got 65"},
		{"pool max_age too short", map[string]string{"a.yaml": ok + "pool: {size: 2, max_age: 30s}\n"}, "a.yaml:6:26: pool.max_age must be at least 1m, got 30s"},
		{"action_timeout too long", map[string]string{"a.yaml": ok + "constraints: {action_timeout: 3h}\n"}, "a.yaml:6:31: constraints.action_timeout must be from 1s to 1h0m0s, got 3h0m0s"},
		{"action_timeout too short", map[string]string{"a.yaml": ok + "constraints: {action_timeout: 500ms}\n"}, "a.yaml:6:31: constraints.action_timeout must be from 1s to 1h0m0s, got 500ms"},
		{"pool of a process worker", map[string]string{"a.yaml": ok + "isolation: {level: process}\npool: {size: 2}\n"}, "a.yaml:7:14: a pool needs isolation.level container (it is process)"},
		{"list for scalar", map[string]string{"a.yaml": ok + "name: [a]\n"}, ""},
		{"scalar for list", map[string]string{"a.yaml": "id: ok_v1\nname: OK\nkind: builtin\nimage: x\ntools: read\n"}, "a.yaml:5:8: tools: want a list, got \"read\""},
		{"string for bool", map[string]string{"a.yaml": ok + "constraints: {readonly: \"yes\"}\n"}, "a.yaml:6:25: constraints.readonly: want true or false, got \"yes\""},
		{"float for int", map[string]string{"a.yaml": ok + "constraints: {max_actions: 1.5}\n"}, "a.yaml:6:28: constraints.max_actions: want a whole number, got \"1.5\""},
		{"duplicate key", map[string]string{"a.yaml": ok + "name: Again\n"}, "a.yaml:6:1: duplicate key \"name\" (first written at line 2)"},
		{"syntax error", map[string]string{"a.yaml": "id: a_v1\nname: [unclosed\n"}, ""},
		{"tab indentation", map[string]string{"a.yaml": "id: a_v1\nconstraints:\n\treadonly: true\n"}, ""},
		{"duplicate key over a base key", map[string]string{"base.yaml": base, "c.yaml": "id: c_v1\nextends: base_v1\ntools: [read]\ntools: [write]\n"}, "c.yaml:4:1: duplicate key \"tools\" (first written at line 3)"},
		{"unknown extends", map[string]string{"a.yaml": "id: a_v1\nextends: nothing_v1\n"}, "a.yaml:2:10: extends unknown definition \"nothing_v1\""},
		{"self extends", map[string]string{"a.yaml": "id: a_v1\nextends: a_v1\n"}, "a.yaml:2:10: extends cycle: a_v1 -> a_v1"},
		{"cycle", map[string]string{"a.yaml": "id: a_v1\nextends: b_v1\n", "b.yaml": "id: b_v1\nextends: c_v1\n", "c.yaml": "id: c_v1\nextends: a_v1\n"}, "c.yaml:2:10: extends cycle: a_v1 -> b_v1 -> c_v1 -> a_v1"},
		{"invalid CEL", map[string]string{"a.yaml": ok + "constraints:\n  rules:\n    - id: r\n      expression: \"action.target ==\"\n"}, ""},
		{"CEL unknown field", map[string]string{"a.yaml": ok + "constraints:\n  rules:\n    - id: r\n      expression: \"action.tagret == 'x'\"\n"}, ""},
		{"CEL not bool", map[string]string{"a.yaml": ok + "constraints:\n  rules:\n    - id: r\n      expression: \"action.target\"\n"}, "a.yaml:9:19: CEL expression must evaluate to bool, not string"},
		{"bad glob", map[string]string{"a.yaml": ok + "constraints:\n  denied_paths: [\"ok/**\", \"a/[b\"]\n"}, "a.yaml:7:27: glob \"a/[b\" is not a valid pattern"},
		{"result unknown field", map[string]string{"a.yaml": ok + "result:\n  max_files: 3\n"}, "a.yaml:7:3: unknown field \"max_files\" in result (known: denied_paths, max_changed_files, max_diff_bytes, rules)"},
		{"result unknown field with hint", map[string]string{"a.yaml": ok + "result:\n  maxDiffBytes: 1MB\n"}, "a.yaml:7:3: unknown field \"maxDiffBytes\" in result (did you mean \"max_diff_bytes\"?)"},
		{"result not a mapping", map[string]string{"a.yaml": ok + "result: [max_changed_files]\n"}, "a.yaml:6:9: result: want a mapping, got a list"},
		{"result negative count", map[string]string{"a.yaml": ok + "result:\n  max_changed_files: -1\n"}, "a.yaml:7:22: result.max_changed_files must not be negative"},
		{"result fractional count", map[string]string{"a.yaml": ok + "result: {max_changed_files: 2.5}\n"}, "a.yaml:6:29: result.max_changed_files: want a whole number, got \"2.5\""},
		{"result negative size", map[string]string{"a.yaml": ok + "result: {max_diff_bytes: -1MB}\n"}, "a.yaml:6:26: result.max_diff_bytes: invalid size \"-1MB\": want a number with an optional unit such as 10MB or 256Mi"},
		{"result bad size unit", map[string]string{"a.yaml": ok + "result: {max_diff_bytes: 1XB}\n"}, "a.yaml:6:26: result.max_diff_bytes: invalid size \"1XB\": unknown unit \"XB\" (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)"},
		{"result bad glob", map[string]string{"a.yaml": ok + "result:\n  denied_paths: [\"ok/**\", \"a/[b\"]\n"}, "a.yaml:7:27: glob \"a/[b\" is not a valid pattern"},
		{"result absolute glob", map[string]string{"a.yaml": ok + "result:\n  denied_paths: [/etc/**]\n"}, "a.yaml:7:18: glob \"/etc/**\": globs are anchored at the workspace root already; drop the leading /"},
		{"result empty glob", map[string]string{"a.yaml": ok + "result:\n  denied_paths: [\"\"]\n"}, "a.yaml:7:18: empty glob"},
		{"result CEL not bool", map[string]string{"a.yaml": ok + "result:\n  rules:\n    - id: r\n      expression: \"result.files_changed\"\n"}, "a.yaml:9:19: CEL expression must evaluate to bool, not int"},
		{"result CEL message not string", map[string]string{"a.yaml": ok + "result:\n  rules:\n    - id: r\n      expression: \"true\"\n      messageExpression: \"result.deleted\"\n"}, "a.yaml:10:26: CEL expression must evaluate to string, not int"},
		{"result rule missing expression", map[string]string{"a.yaml": ok + "result:\n  rules:\n    - id: r\n      message: no\n"}, "a.yaml:8:7: empty expression"},
		{"result rule bad id", map[string]string{"a.yaml": ok + "result:\n  rules:\n    - id: No-Vendor\n      expression: \"true\"\n"}, "a.yaml:8:11: rule id \"No-Vendor\" must match ^[a-z][a-z0-9_]{0,62}$"},
		{"result rule built-in id", map[string]string{"a.yaml": ok + "result:\n  rules:\n    - id: denied_paths\n      expression: \"true\"\n"}, "a.yaml:8:11: rule id \"denied_paths\" is a built-in constraint id"},
		{"result rule id used twice", map[string]string{"a.yaml": ok + "result:\n  rules:\n    - id: r\n      expression: \"true\"\n    - id: r\n      expression: \"true\"\n"}, "a.yaml:10:11: rule id \"r\" is used twice"},
		{"result rule unknown field", map[string]string{"a.yaml": ok + "result:\n  rules:\n    - id: r\n      expresion: \"true\"\n"}, "a.yaml:9:7: unknown field \"expresion\" in result.rules[0] (did you mean \"expression\"?)"},
		{"result error in base reported in base", map[string]string{"base.yaml": base + "result: {max_changed_files: -5}\n", "c.yaml": "id: c_v1\nextends: base_v1\n"}, "base.yaml:16:29: result.max_changed_files must not be negative"},
		{"missing id", map[string]string{"a.yaml": "name: x\n"}, "a.yaml:1:1: missing id: every definition needs an id such as \"my_worker_v1\""},
		{"bad id", map[string]string{"a.yaml": "id: NoVersion\nname: x\nkind: builtin\nimage: x\ntools: [read]\n"}, "a.yaml:1:5: id \"NoVersion\" must match ^[a-z][a-z0-9_]*_v[0-9]+$ (lower case, with a version suffix such as _v1)"},
		{"duplicate id", map[string]string{"a.yaml": ok, "b.yaml": ok}, "b.yaml:1:5: duplicate id \"ok_v1\": already defined in a.yaml"},
		{"empty file", map[string]string{"a.yaml": ""}, "a.yaml:1:1: empty file: want a worker definition mapping"},
		{"not a mapping", map[string]string{"a.yaml": "- a\n- b\n"}, "a.yaml:1:1: want a mapping of definition fields, got a list"},
		{"alias", map[string]string{"a.yaml": "id: a_v1\nname: &n x\ndescription: *n\nkind: builtin\nimage: x\ntools: [read]\n"}, "a.yaml:3:14: description: aliases are not supported in worker definitions; use extends to share settings"},
		{"merge key", map[string]string{"a.yaml": ok + "isolation:\n  <<: {network: bridge}\n"}, "a.yaml:7:3: isolation: merge keys (<<) are not supported; use extends"},
		{"missing name", map[string]string{"a.yaml": "id: a_v1\nkind: builtin\nimage: x\ntools: [read]\n"}, "a.yaml:1:1: missing name"},
		{"bad kind", map[string]string{"a.yaml": "id: a_v1\nname: A\nkind: robot\nimage: x\ntools: [read]\n"}, "a.yaml:3:7: kind \"robot\" is not one of builtin, agent, mcp"},
		{"root user", map[string]string{"a.yaml": ok + "isolation: {user: \"0:0\"}\n"}, "a.yaml:6:19: isolation.user must not be root (uid 0)"},
		{"root spelled 00", map[string]string{"a.yaml": ok + "isolation: {user: \"00:5\"}\n"}, "a.yaml:6:19: isolation.user must not be root (uid 0)"},
		{"network", map[string]string{"a.yaml": ok + "isolation: {network: host}\n"}, "a.yaml:6:22: isolation.network \"host\" is not one of none, egress, bridge"},
		{"egress without egress network", map[string]string{"a.yaml": ok + "isolation: {egress: [\"a.example:443\"]}\n"}, "a.yaml:6:21: isolation.egress needs isolation.network: egress (it is none)"},
		{"egress without port", map[string]string{"a.yaml": ok + "isolation: {network: egress, egress: [\"a.example\"]}\n"}, "a.yaml:6:39: isolation.egress[0] \"a.example\" must be host:port"},
		{"egress wildcard", map[string]string{"a.yaml": ok + "isolation: {network: egress, egress: [\"*.example:443\"]}\n"}, "a.yaml:6:39: isolation.egress[0] \"*.example:443\" names no host: a DNS name or an IP address, without wildcards"},
		{"egress bad port", map[string]string{"a.yaml": ok + "isolation: {network: egress, egress: [\"a.example:0\"]}\n"}, "a.yaml:6:39: isolation.egress[0] \"a.example:0\" has no port from 1 to 65535"},
		{"agent without backend", map[string]string{"a.yaml": "id: a_v1\nname: A\nkind: agent\nimage: x\ntools: [task]\nagent: {model: sonnet}\n"}, "a.yaml:6:8: agent.backend \"\" is not one of [claude codex opencode gemini command]"},
		{"agent prompt missing", map[string]string{"a.yaml": "id: a_v1\nname: A\nkind: agent\nimage: x\ntools: [task]\nagent: {backend: claude, system_prompt: prompts/none.md}\n"}, "a.yaml:6:41: agent.system_prompt \"prompts/none.md\": no such file in the catalog"},
		{"agent prompt escapes", map[string]string{"a.yaml": "id: a_v1\nname: A\nkind: agent\nimage: x\ntools: [task]\nagent: {backend: claude, system_prompt: ../../etc/passwd}\n"}, "a.yaml:6:41: agent.system_prompt \"../../etc/passwd\" must be a clean path inside the catalog"},
		{"agent tool name", map[string]string{"a.yaml": "id: a_v1\nname: A\nkind: agent\nimage: x\ntools: [task, git_commit]\nagent: {backend: claude}\n"}, "a.yaml:5:15: tool \"git_commit\": agent workers accept action types only (task, read, write, ...)"},
		{"mcp without command", map[string]string{"a.yaml": "id: a_v1\nname: A\nkind: mcp\nimage: x\ntools: [echo]\n"}, "a.yaml:1:1: kind mcp needs mcp.command, the argv of the image's MCP server"},
		{"error in base reported in base", map[string]string{"base.yaml": strings.Replace(base, "max_file_size: 1MB", "max_file_size: lots", 1), "c.yaml": "id: c_v1\nextends: base_v1\n"}, "base.yaml:11:18: constraints.max_file_size: invalid size \"lots\": want a number with an optional unit such as 10MB or 256Mi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := workerdef.Load(catalog(tt.files))
			var es workerdef.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("got %v, want workerdef.Errors", err)
			}
			for _, e := range es {
				if e.File == "" || e.Line < 1 || e.Column < 1 || e.Msg == "" {
					t.Errorf("error without a position: %#v", e)
				}
			}
			if tt.want != "" && !strings.Contains("\n"+err.Error()+"\n", "\n"+tt.want+"\n") {
				t.Errorf("got\n%v\nwant the line\n%s", err, tt.want)
			}
		})
	}
}

// Syntax errors and CEL errors carry the line and column where they are.
func TestLoadErrorPositionsForSyntaxAndCEL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body, prefix, contains string
	}{
		{"id: a_v1\nname: [unclosed\n", "a.yaml:3:", ""},
		{"id: a_v1\nconstraints:\n\treadonly: true\n", "a.yaml:3:1:", "tab"},
		{"id: a_v1\nname: A\nname: B\n", "a.yaml:3:1:", "duplicate key \"name\""},
		{"id: ok_v1\nname: OK\nkind: builtin\nimage: x\ntools: [read]\nconstraints:\n  rules:\n    - id: r\n      expression: \"action.tagret == 'x'\"\n", "a.yaml:9:19:", "undefined field 'tagret'"},
		{"id: ok_v1\nname: OK\nkind: builtin\nimage: x\ntools: [read]\nconstraints:\n  rules:\n    - id: r\n      expression: \"action.target ==\"\n", "a.yaml:9:19:", "invalid CEL"},
		{"id: ok_v1\nname: OK\nkind: builtin\nimage: x\ntools: [read]\nresult:\n  rules:\n    - id: r\n      expression: \"result.files_changed >\"\n", "a.yaml:9:19:", "invalid CEL"},
		{"id: ok_v1\nname: OK\nkind: builtin\nimage: x\ntools: [read]\nresult:\n  rules:\n    - id: r\n      expression: \"result.filez == []\"\n", "a.yaml:9:19:", "undefined field 'filez'"},
		{"id: ok_v1\nname: OK\nkind: builtin\nimage: x\ntools: [read]\nresult:\n  rules:\n    - id: r\n      expression: \"action.target == 'x'\"\n", "a.yaml:9:19:", "undeclared reference to 'action'"},
	} {
		_, err := workerdef.Load(catalog(map[string]string{"a.yaml": tt.body}))
		if err == nil || !strings.HasPrefix(err.Error(), tt.prefix) || !strings.Contains(err.Error(), tt.contains) {
			t.Errorf("%q: got %v, want prefix %q containing %q", tt.body, err, tt.prefix, tt.contains)
		}
	}
}

// Every problem of a catalog is reported at once, in file order.
func TestLoadReportsEveryError(t *testing.T) {
	t.Parallel()
	_, err := workerdef.Load(catalog(map[string]string{
		"a.yaml": "id: a_v1\nname: A\nkind: builtin\nimage: x\ntools: [read]\nbogus: 1\n",
		"b.yaml": "id: b_v1\nextends: missing_v1\n",
		"c.yaml": "id: c_v1\nname: C\nkind: builtin\nimage: x\ntools: [read]\nconstraints: {max_file_size: big}\n",
	}))
	var es workerdef.Errors
	if !errors.As(err, &es) || len(es) != 3 {
		t.Fatalf("got %v, want 3 errors", err)
	}
	for i, f := range []string{"a.yaml", "b.yaml", "c.yaml"} {
		if es[i].File != f {
			t.Errorf("error %d is in %s, want %s", i, es[i].File, f)
		}
	}
}

func TestLoadRefusesHugeFiles(t *testing.T) {
	t.Parallel()
	body := "id: a_v1\ndescription: " + strings.Repeat("x", workerdef.MaxFileSize) + "\n"
	_, err := workerdef.Load(catalog(map[string]string{"a.yaml": body}))
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("got %v, want a size error", err)
	}
}
