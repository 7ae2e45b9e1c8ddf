package gate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// shellDef allows what shell_v1 allows, plus the other subcommands the argv
// tables know and a program they do not.
func shellDef() *meshtype.Definition {
	return &meshtype.Definition{
		ID:    "shell_v1",
		Kind:  meshtype.KindBuiltin,
		Tools: []string{"exec"},
		Constraints: meshtype.Constraints{
			Commands: []string{
				"go test", "go build", "go vet", "go list", "go version",
				"git status", "git diff", "git log", "git show", "git",
				"/usr/local/go/bin/go test", "echo",
			},
		},
	}
}

// For go and git, flags and positional arguments are parsed against tables:
// the known escapes are refused with a message naming the flag, and the
// usual invocations pass.
func TestArgv(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, shellDef())
	tests := []struct {
		argv string // split on spaces
		want string // a part of the refusal; "" when allowed
	}{
		// Escapes.
		{"go vet -vettool=/bin/sh", "go vet: flag -vettool is not allowed (allowed: -json, -tags, -mod, "},
		{"go vet -vettool /bin/sh", "go vet: flag -vettool is not allowed"},
		{"go vet --vettool=/bin/sh ./...", "go vet: flag --vettool is not allowed"},
		{"go test -exec=/bin/sh ./...", "go test: flag -exec is not allowed"},
		{"go test -toolexec x", "go test: flag -toolexec is not allowed"},
		{"go test ./... -toolexec x", "go test: flag -toolexec is not allowed"},
		{"go build -o /etc/x", "go build: flag -o value /etc/x: absolute paths are refused"},
		{"go build -o ../x", `go build: flag -o value ../x: path contains ".."`},
		{"go build -o=a/../../x .", `go build: flag -o value a/../../x: path contains ".."`},
		{"go test -coverprofile=/tmp/c.out ./...", "go test: flag -coverprofile value /tmp/c.out: absolute"},
		{"go test -ldflags=-extld=/bin/sh", "go test: flag -ldflags is not allowed"},
		{"go test -gcflags=all=-N", "go test: flag -gcflags is not allowed"},
		{"go test -overlay=o.json", "go test: flag -overlay is not allowed"},
		{"go test -modfile=/tmp/go.mod", "go test: flag -modfile is not allowed"},
		{"go test -C /tmp", "go test: flag -C is not allowed"},
		{"go test -pgo=/x", "go test: flag -pgo is not allowed"},
		{"go test ../../outside", `go test: package or file ../../outside: path contains ".."`},
		{"go test ./pkg/../../x", `path contains ".."`},
		{"go test /abs", "go test: package or file /abs: absolute paths are refused"},
		{"go test -coverpkg=./...,/abs ./...", "go test: flag -coverpkg value ./...,/abs: absolute"},
		{"go test -args -x", "go test: flag -args is not allowed"},
		{"go test -test.run=X", "go test: flag -test.run is not allowed"},
		{"go test -test.v", "go test: flag -test.v is not allowed"},
		{"go test -- -x", "go test: flag -- is not allowed"},
		{"go test -", "go test: flag - is not allowed"},
		{"go test -v=maybe", "go test: flag -v takes true or false, not maybe"},
		{"go test -vet=printf,vettool", "go test: flag -vet value printf,vettool: want off, all or"},
		{"go test -mod=foo", "go test: flag -mod value foo: want one of readonly, vendor, mod"},
		{"go test -count=x", "go test: flag -count value x: want an integer"},
		{"go test -run", "go test: flag -run needs a value"},
		{"go vet -printf.funcs=x", "go vet: flag -printf.funcs is not allowed"},
		{"go build -ldflags -X=x", "go build: flag -ldflags is not allowed"},
		{"go run main.go", `does not start with an allowed command`},
		{"git diff --ext-diff", "git diff: flag --ext-diff is not allowed (allowed: -p, --patch, -u, "},
		{"git diff --no-index /etc/passwd x", "git diff: flag --no-index is not allowed"},
		{"git diff --output=/tmp/x", "git diff: flag --output is not allowed"},
		{"git diff --out=/tmp/x", "git diff: flag --out is not allowed"},
		{"git diff --textconv", "git diff: flag --textconv is not allowed"},
		{"git diff -O/etc/order", "git diff: flag -O is not allowed"},
		{"git diff -pO/etc/order", "git diff: flag -O is not allowed"},
		{"git diff /etc/passwd x", "git diff: revision or path /etc/passwd: absolute paths are refused"},
		{"git diff HEAD -- ../x", `git diff: path ../x: path contains ".."`},
		{"git diff -- /etc/passwd", "git diff: path /etc/passwd: absolute"},
		{"git diff --stat=80 --unified 3", ""}, // "3" is a revision, as git reads it
		{"git diff --diff-filter AM", "git diff: flag --diff-filter needs a value: write --diff-filter=<value>"},
		{"git diff --diff-filter=AZ", "git diff: flag --diff-filter value AZ: want letters"},
		{"git diff -Ux", "git diff: flag -U value x: want a number of lines"},
		{"git diff --color=always", "git diff: flag --color value always: want one of never"},
		{"git diff --name-only=x", "git diff: flag --name-only takes no value"},
		{"git diff -", "git diff: flag - is not allowed"},
		{"git status --unknown", "git status: flag --unknown is not allowed (allowed: -s, --short, "},
		{"git status --porcelain=v3", "git status: flag --porcelain value v3: want one of v1, v2"},
		{"git status -ux", "git status: flag -u value x: want one of no, normal, all"},
		{"git status -sX", "git status: flag -X is not allowed"},
		{"git status -s\u00e9", `git status: flag "-\u00e9" is not allowed`},
		{"git status -s\x01", `git status: flag "-\x01" is not allowed`},
		{"git log --show-signature", "git log: flag --show-signature is not allowed"},
		{"git log -n", "git log: flag -n needs a value"},
		{"git show --ext-diff HEAD", "git show: flag --ext-diff is not allowed"},
		{"git -C /etc diff", "git: options before the subcommand (-C) are not allowed; name one of the subcommands diff, log, show, status first"},
		{"git -c diff.external=sh diff", "git: options before the subcommand (-c) are not allowed"},
		{"git commit -m x", "git: subcommand commit is not allowed (allowed: diff, log, show, status)"},
		{"/usr/local/go/bin/go test -exec sh", "go test: flag -exec is not allowed"},

		// Usual invocations.
		{"go test ./...", ""},
		{"go test -run TestX -count=1 -v ./pkg/...", ""},
		{"go test -timeout 30s .", ""},
		{"go test --run=TestX --count 2 ./...", ""},
		{"go test -run -exec ./...", ""}, // -exec is the -run pattern, as go reads it
		{"go test -race -cover -covermode=atomic -coverpkg=./... -coverprofile=out/cover.out ./...", ""},
		{"go test -bench . -benchmem -benchtime=100x -cpu 1,2 -run x ./pkg", ""},
		{"go test -json -short -failfast -shuffle=on -parallel 4 -p 2 -list . ./...", ""},
		{"go test -tags=integration,e2e -mod=readonly -trimpath -vet=off ./...", ""},
		{"go test -vet=printf,atomic -skip TestSlow -v=false example.com/m/pkg", ""},
		{"go test -x -n -a ./...", ""},
		{"go vet ./...", ""},
		{"go vet -printf=false ./...", ""},
		{"go vet -json -composites -tags x ./...", ""},
		{"go build ./...", ""},
		{"go build -o bin/app -v -trimpath ./cmd/app", ""},
		{"go list -json -deps -f {{.Dir}} ./...", ""},
		{"go list -json=Dir,ImportPath ./...", ""},
		{"go version -m bin/app", ""},
		{"go version", ""},
		{"git diff", ""},
		{"git diff --stat", ""},
		{"git diff -U5 HEAD~1 -- main.go", ""},
		{"git diff --stat abc123", ""},
		{"git diff --cached --name-status -M50% -C --diff-filter=AMd --exit-code", ""},
		{"git diff HEAD~3..HEAD --word-diff=plain --no-color --no-ext-diff --no-textconv", ""},
		{"git diff -wbp --unified=0 main...feature -- -odd-name", ""},
		{"git status --porcelain=v2 -z", ""},
		{"git status --porcelain", ""},
		{"git status -sb -uno --ignored=matching pkg", ""},
		{"git status --untracked-files=all --no-ahead-behind", ""},
		{"git log -5 --oneline", ""},
		{"git log -n 3 --format=%H%x00%s --stat", ""},
		{"git log -n3 --since=2.weeks --author=me --grep=fix -i origin/main..HEAD -- pkg", ""},
		{"git show --stat HEAD", ""},
		{"git show HEAD:main.go", ""},
		{"git", ""},
		{"/usr/local/go/bin/go test ./...", ""},
		{"echo --anything /etc/passwd", ""}, // other programs: prefix only
	}
	for _, tt := range tests {
		t.Run(tt.argv, func(t *testing.T) {
			t.Parallel()
			a := &meshtype.Action{Type: meshtype.ActionExec, Command: strings.Split(tt.argv, " ")}
			vs := g.Evaluate(a, meshtype.JourneyState{})
			if tt.want == "" {
				if vs != nil {
					t.Fatalf("got %+v, want no violations", vs)
				}
				return
			}
			if len(vs) != 1 || vs[0].ConstraintID != gate.ConstraintCommands || !strings.Contains(vs[0].Message, tt.want) {
				t.Fatalf("got %+v, want one %q violation containing %q", vs, gate.ConstraintCommands, tt.want)
			}
		})
	}
}

// A command entry for go or git that the argv check would always refuse is a
// compile error; one ending in a flag that needs a value is fine.
func TestArgvCompile(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		entry string
		want  string // a part of the error; "" when it compiles
	}{
		{"go run", "go: subcommand run is not allowed (allowed: build, list, test, version, vet)"},
		{"go generate", "go: subcommand generate is not allowed"},
		{"go test -exec=sh", "go test: flag -exec is not allowed"},
		{"go test /abs", "absolute paths are refused"},
		{"git push", "git: subcommand push is not allowed"},
		{"git -c core.pager=sh diff", "git: options before the subcommand"},
		{"go test -run", ""},
		{"git diff --diff-filter", ""},
		{"git log -n", ""},
		{"go test -count=1", ""},
		{"go", ""},
		{"make test", ""},
	} {
		_, err := gate.Compile(&meshtype.Definition{ID: "x_v1", Tools: []string{"exec"}, Constraints: meshtype.Constraints{Commands: []string{"echo", tt.entry}}})
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.entry, err)
			}
			continue
		}
		var ce *gate.CompileError
		if !errors.As(err, &ce) || ce.Path != "constraints.commands[1]" || !strings.Contains(ce.Msg, tt.want) {
			t.Errorf("%q: got %v, want constraints.commands[1] containing %q", tt.entry, err, tt.want)
		}
	}
}

// Allowed go and git invocations cost no allocations.
func TestArgvAllocs(t *testing.T) {
	g := mustCompile(t, shellDef())
	for _, argv := range [][]string{
		{"go", "test", "-run", "TestX", "-count=1", "-v", "-coverprofile=c.out", "-vet=printf", "./pkg/..."},
		{"git", "diff", "-U5", "--stat", "--diff-filter=AM", "HEAD~1", "--", "main.go"},
		{"git", "status", "-sb", "--porcelain=v2", "-z"},
	} {
		a := &meshtype.Action{Type: meshtype.ActionExec, Command: argv}
		if n := testing.AllocsPerRun(100, func() { g.Evaluate(a, meshtype.JourneyState{}) }); n != 0 {
			t.Errorf("%v: %v allocations, want 0", argv, n)
		}
	}
}
