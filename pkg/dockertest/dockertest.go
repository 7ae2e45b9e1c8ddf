// Package dockertest cleans up after tests that make Docker resources: it
// removes the containers, volumes and networks carrying a label (every test
// labels what it makes meshwork.test=<something of its own>). It drives the
// docker CLI, as a developer cleaning up by hand would. Only tests import it.
package dockertest

import (
	"context"
	"os/exec"
	"strings"
)

// removeBatch is how many containers one `docker rm` is given. The CLI
// removes a call's containers all at once, and hundreds removed at once
// (a scale benchmark's journeys) deadlock Docker 20.10's network controller
// (libnetwork's store lock, between sandbox deletes and network lookups):
// dockerd then answers nothing until it is restarted.
const removeBatch = 10

// RemoveLabelled removes the containers (with their anonymous volumes), the
// volumes and the networks that carry label ("key=value"). It reports
// nothing: what it could not remove is left for the next run's clean-up.
func RemoveLabelled(label string) {
	ctx := context.Background()
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
