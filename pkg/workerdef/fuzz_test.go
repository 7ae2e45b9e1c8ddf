package workerdef_test

import (
	"errors"
	"testing"

	"github.com/meshwork/meshwork/pkg/workerdef"
)

// FuzzLoad feeds arbitrary YAML as a definition beside a valid base. Load must
// not panic, every error must carry a position, and loading the same bytes
// twice must give the same result.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"id: a_v1\nextends: base_v1\nname: A\n",
		"id: a_v1\nname: A\nkind: builtin\nimage: x\ntools: [read]\nconstraints:\n  max_file_size: 1MB\n  rules:\n    - id: r\n      expression: \"action.target.startsWith('a')\"\n",
		"id: a_v1\nextends: a_v1\n",
		"id: a_v1\nname: &a [x]\ntools: *a\n",
		"id: a_v1\nisolation: {resources: {memory: 99999999999999999999Ti}}\n",
		"id: a_v1\nconstraints: {denied_paths: ['[', '**/.env']}\n",
		"{{{{",
		"id: a_v1\nagent: {backend: claude, system_prompt: ../x}\nkind: agent\n",
		"- - - -\n",
		"id: a_v1\nname: !!binary aGVsbG8=\n",
		"id: a_v1\nextends: base_v1\nname: A\nresult:\n  max_changed_files: 3\n  max_diff_bytes: 1MB\n  denied_paths: ['.github/**', '[']\n  rules:\n    - id: r\n      expression: \"result.files.all(f, !f.old_path.startsWith('vendor/'))\"\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		files := map[string]string{"base.yaml": base, "a.yaml": string(data)}
		c1, err1 := workerdef.Load(catalog(files))
		c2, err2 := workerdef.Load(catalog(files))
		if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("different results: %v / %v", err1, err2)
		}
		if err1 != nil {
			var es workerdef.Errors
			if !errors.As(err1, &es) || len(es) == 0 {
				t.Fatalf("error is not workerdef.Errors: %v", err1)
			}
			for _, e := range es {
				if e.File == "" || e.Line < 1 || e.Column < 1 {
					t.Fatalf("error without a position: %#v", e)
				}
			}
			return
		}
		for _, e := range c1.Entries() {
			e2, _ := c2.Lookup(e.Definition.ID)
			if e2 == nil || e2.Hash != e.Hash {
				t.Fatalf("%s hashed differently across loads", e.Definition.ID)
			}
		}
	})
}
