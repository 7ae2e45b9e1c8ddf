package pipeline

import "testing"

// A task shows a patch's text hunks as they are and each binary file's
// content as one line.
func TestReadablePatch(t *testing.T) {
	t.Parallel()
	const text = "diff --git a/a.go b/a.go\n--- a/a.go\n+++ b/a.go\n@@ -1 +1 @@\n-GIT binary patch\n+x\n"
	const binary = "diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111\nGIT binary patch\nliteral 5\nMc${NkU|?VX1^@s6\n\nliteral 0\nHcmV?d00001\n\n"
	const deleted = "diff --git a/old.bin b/old.bin\ndeleted file mode 100644\nindex 2222222222222222222222222222222222222222..0000000000000000000000000000000000000000\nGIT binary patch\nliteral 0\nHcmV?d00001\n\n"
	for _, tt := range []struct{ in, want string }{
		{text, text},
		{text + binary + deleted + text, text +
			"diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111\n(binary content, not shown)\n" +
			"diff --git a/old.bin b/old.bin\ndeleted file mode 100644\nindex 2222222222222222222222222222222222222222..0000000000000000000000000000000000000000\n(binary content, not shown)\n" + text},
		{"", ""},
	} {
		if got := readablePatch(tt.in); got != tt.want {
			t.Errorf("readablePatch(%q) =\n%q\nwant\n%q", tt.in, got, tt.want)
		}
	}
}
