package source

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
)

// A stream of exactly the limit passes; one byte more is refused.
func TestInflateLimit(t *testing.T) {
	for _, tt := range []struct {
		size    int
		refused bool
	}{{99, false}, {100, false}, {101, true}} {
		r := &inflateLimit{r: strings.NewReader(strings.Repeat("x", tt.size)), left: 100, limit: 100}
		data, err := io.ReadAll(r)
		if errors.Is(err, bases.ErrRefused) != tt.refused || !tt.refused && (err != nil || len(data) != tt.size) {
			t.Errorf("%d bytes: %d read, %v", tt.size, len(data), err)
		}
	}
}
