package dockertest_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/dockertest"
)

// Everything with the label goes, in more than one batch; what has another
// label stays.
func TestRemoveLabelled(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	if !dockertest.HasImage("meshwork/worker:latest") {
		t.Skip("needs the meshwork/worker image (make offline-images)")
	}
	label := "meshwork.test=dockertest-" + strings.ToLower(rand.Text())
	other := label + "-other"
	t.Cleanup(func() {
		dockertest.RemoveLabelled(context.Background(), label)
		dockertest.RemoveLabelled(context.Background(), other)
	})
	docker := func(args ...string) string { return dockertest.Docker(t, args...) }
	for range 12 {
		docker("create", "--label", label, "meshwork/worker:latest", "idle")
	}
	kept := docker("create", "--label", other, "meshwork/worker:latest", "idle")
	docker("volume", "create", "--label", label)
	docker("network", "create", "--label", label, strings.TrimPrefix(label, "meshwork.test="))

	dockertest.RemoveLabelled(context.Background(), label)
	for _, kind := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}, {"network", "ls", "-q"}} {
		if left := docker(append(kind, "--filter", "label="+label)...); left != "" {
			t.Errorf("docker %v still lists %q", kind, left)
		}
	}
	if got := docker("ps", "-aq", "--no-trunc", "--filter", "label="+other); got != kept {
		t.Errorf("the container with another label: %q, want %q", got, kept)
	}
}
