package docker_test

import (
	"context"
	"sync"
	"testing"

	"github.com/moby/moby/client"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/runtimetest"
)

// Runtimes ensuring one network at once, without the marketplaces' lock:
// Docker lets two networks share a name, so some may create one each. Each
// succeeds, and one network of that name is left.
func TestEnsureInternalNetworkConcurrently(t *testing.T) {
	t.Parallel()
	c := engine(t)
	labels := testLabels(t, c)
	name := "meshwork-test-" + labels[runtimetest.LabelTest]
	t.Cleanup(func() {
		res, _ := c.NetworkList(context.WithoutCancel(t.Context()), client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
		for _, n := range res.Items {
			_, _ = c.NetworkRemove(context.WithoutCancel(t.Context()), n.ID, client.NetworkRemoveOptions{})
		}
	})
	const replicas = 6
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range replicas {
		rt := newRuntime(t, c)
		wg.Go(func() {
			<-start
			_, errs[i] = rt.EnsureInternalNetwork(t.Context(), name, labels)
		})
	}
	close(start)
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
	}
	res, err := c.NetworkList(t.Context(), client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Items) != 1 {
		t.Fatalf("%d networks named %s, want 1", len(res.Items), name)
	}
	// And it is the one a later call finds.
	left, err := c.NetworkInspect(t.Context(), res.Items[0].ID, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := newRuntime(t, c).EnsureInternalNetwork(t.Context(), name, labels)
	if err != nil || len(left.Network.IPAM.Config) == 0 || again != left.Network.IPAM.Config[0].Gateway.String() {
		t.Errorf("a later call: %s %v, want the gateway of the network left (%+v)", again, err, left.Network.IPAM.Config)
	}
}
