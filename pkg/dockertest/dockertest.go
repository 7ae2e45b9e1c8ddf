// Package dockertest is the docker CLI for tests: it runs a command that
// must succeed, and cleans up after tests that make Docker resources by
// removing the containers, volumes and networks carrying a label (every
// test labels what it makes meshwork.test=<something of its own>). It
// drives the CLI, as a developer would by hand. Only tests import it.
package dockertest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Docker runs the docker CLI with args and returns its output, trimmed; a
// failure fails the test with the output.
func Docker(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.CommandContext(context.Background(), "docker", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("docker %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// HasImage reports whether the engine holds image (tests never pull).
func HasImage(image string) bool {
	return exec.CommandContext(context.Background(), "docker", "image", "inspect", image).Run() == nil
}

// RequireImage fails the test when the engine lacks image; build says how
// to build it ("run `make offline-images`").
func RequireImage(tb testing.TB, image, build string) {
	tb.Helper()
	if !HasImage(image) {
		tb.Fatalf("image %s is missing: %s", image, build)
	}
}

// removeBatch is how many containers one `docker rm` is given. The CLI
// removes a call's containers up to 50 at a time, and 50 started containers
// removed at once (a scale benchmark's journeys) deadlocked Docker 20.10's
// network controller (libnetwork's store lock, between sandbox deletes and
// network lookups): dockerd then answered nothing until it was restarted.
// Ten at a time has not; it is a measured choice, not a derived bound.
const removeBatch = 10

// removeTimeout bounds a clean-up whose ctx has no deadline: a dockerd that
// answers nothing does not hold a test run forever.
const removeTimeout = 5 * time.Minute

// RemoveLabelled removes the containers (with their anonymous volumes), the
// volumes and the networks that carry label ("key=value"). It reports
// nothing: what it could not remove is left for the next run's clean-up.
func RemoveLabelled(ctx context.Context, label string) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, removeTimeout)
		defer cancel()
	}
	list := func(args ...string) []string {
		out, _ := exec.CommandContext(ctx, "docker", append(args, "--filter", "label="+label)...).Output()
		return strings.Fields(string(out))
	}
	ids := list("ps", "-aq")
	for len(ids) > 0 {
		n := min(removeBatch, len(ids))
		_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-fv"}, ids[:n]...)...).Run()
		ids = ids[n:]
	}
	if vols := list("volume", "ls", "-q"); len(vols) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"volume", "rm", "-f"}, vols...)...).Run()
	}
	if nets := list("network", "ls", "-q"); len(nets) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"network", "rm"}, nets...)...).Run()
	}
}
