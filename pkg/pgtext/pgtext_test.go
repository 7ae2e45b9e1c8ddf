package pgtext_test

import (
	"testing"

	"github.com/meshwork/meshwork/pkg/pgtext"
)

func TestScrub(t *testing.T) {
	for in, want := range map[string]string{
		"":               "",
		"plain":          "plain",
		"a\x00b\x00":     "a\uFFFDb\uFFFD",
		"\x00":           "\uFFFD",
		"héllo\x00wörld": "héllo\uFFFDwörld",
	} {
		if got := pgtext.Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
}
