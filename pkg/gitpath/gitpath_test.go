package gitpath_test

import (
	"testing"

	"github.com/meshwork/meshwork/pkg/gitpath"
)

// The names git refuses as its directory, on the file systems it runs on,
// and names that only look like them.
func TestIsDotGit(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		".git": true, ".GIT": true, ".Git": true,
		".git.": true, ".git ": true, ".git. .": true, ".git::$INDEX_ALLOCATION": true, ".git .:x": true,
		"git~1": true, "GIT~1": true, "git~1.": true,
		".g\u200cit": true, "\ufeff.git": true, ".gi\u200et": true,
		".gitignore": false, ".github": false, ".git-x": false, "git": false, "git~2": false, "x.git": false,
		"": false, ".": false, ".gi": false,
	} {
		if got := gitpath.IsDotGit(name); got != want {
			t.Errorf("IsDotGit(%q) = %v, want %v", name, got, want)
		}
	}
	if !gitpath.HasDotGit("a/.git./hooks/pre-commit") || gitpath.HasDotGit("a/.github/workflows/ci.yml") {
		t.Error("HasDotGit does not look at every component")
	}
}

func FuzzIsDotGit(f *testing.F) {
	for _, s := range []string{".git", ".git. ", "git~1", ".g\u200cit", ".gitignore"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		// ".git" itself, in any case, is always one; a name that is one
		// stays one with a trailing dot.
		got := gitpath.IsDotGit(name)
		if got && !gitpath.IsDotGit(name+".") {
			t.Errorf("%q is git's directory, %q is not", name, name+".")
		}
	})
}
