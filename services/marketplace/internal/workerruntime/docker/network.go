package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	apinetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// internalNetworkPattern names the internal networks a worker may join:
// networks of Meshwork's own, made by EnsureInternalNetwork (or by Compose,
// which declares the same network).
var internalNetworkPattern = regexp.MustCompile(`^meshwork-[a-z0-9][a-z0-9_.-]{0,62}$`)

// labelNetwork marks the networks the runtime made.
const labelNetwork = "meshwork.network"

// EnsureInternalNetwork implements workerruntime.Networker: it creates the
// internal network name (no route out of it: Docker's internal bridge) if
// there is none, and returns its gateway, the host's address on it. A
// network of that name that is not internal is refused: workers on it
// could reach anything.
//
// Docker lets two networks have one name. Marketplaces on one database
// create the network under a lock of theirs (store.LockNetwork); should twins
// exist all the same (marketplaces on different databases), each keeps the
// first one made and removes the others, so the name means one network
// again.
func (r *Runtime) EnsureInternalNetwork(ctx context.Context, name string, labels map[string]string) (string, error) {
	if !internalNetworkPattern.MatchString(name) {
		return "", fmt.Errorf("network %q is not a name Meshwork uses for internal networks (meshwork-...)", name)
	}
	// A twin kept by another marketplace may be removed under this one:
	// then it looks again.
	for attempt := 0; ; attempt++ {
		gateway, err := r.ensureNetworkOnce(ctx, name, labels)
		if !cerrdefs.IsNotFound(err) || attempt == 3 {
			return gateway, err
		}
	}
}

func (r *Runtime) ensureNetworkOnce(ctx context.Context, name string, labels map[string]string) (string, error) {
	nets, err := r.networksNamed(ctx, name)
	if err == nil && len(nets) == 0 {
		l := map[string]string{labelNetwork: "internal"}
		maps.Copy(l, labels)
		if _, err := r.engine.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Internal: true, Labels: l}); err != nil && !cerrdefs.IsConflict(err) {
			return "", fmt.Errorf("creating the internal network %s: %w", name, err)
		}
		nets, err = r.networksNamed(ctx, name)
	}
	if err != nil {
		return "", fmt.Errorf("listing the networks named %s: %w", name, err)
	}
	if len(nets) == 0 {
		return "", fmt.Errorf("the network %s was created but is not listed", name)
	}
	slices.SortFunc(nets, func(a, b apinetwork.Summary) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	for _, extra := range nets[1:] {
		// Its maker's twin: nothing is on it yet (a name that is
		// ambiguous cannot be joined), or the removal fails and the next
		// start tries again.
		if _, err := r.engine.NetworkRemove(ctx, extra.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			r.logger.WarnContext(ctx, "removing a second network of the same name failed", slog.String("network", name), slog.String("id", extra.ID), slog.Any("error", err))
		}
	}
	res, err := r.engine.NetworkInspect(ctx, nets[0].ID, client.NetworkInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("inspecting the network %s: %w", name, err)
	}
	if !res.Network.Internal {
		return "", fmt.Errorf("network %s exists but is not internal: egress workers on it would have a route out", name)
	}
	for _, c := range res.Network.IPAM.Config {
		if c.Gateway.IsValid() {
			return c.Gateway.String(), nil
		}
	}
	return "", fmt.Errorf("network %s has no gateway address", name)
}

// networksNamed lists the networks whose name is exactly name (the
// engine's filter matches parts of names).
func (r *Runtime) networksNamed(ctx context.Context, name string) ([]apinetwork.Summary, error) {
	res, err := r.engine.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
	if err != nil {
		return nil, err
	}
	var out []apinetwork.Summary
	for _, n := range res.Items {
		if n.Name == name {
			out = append(out, n)
		}
	}
	return out, nil
}

// JoinNetwork connects the container the caller runs in (its id, or the
// host name Docker gave it) to network under alias, unless it is on it
// already. A marketplace in a container uses it to be on the egress
// network it proxies for, without Compose owning that network: the workers
// attached to it outlive the stack's containers.
func (r *Runtime) JoinNetwork(ctx context.Context, self, network, alias string) error {
	res, err := r.engine.ContainerInspect(ctx, self, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("finding the marketplace's own container %q: %w", self, err)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		if _, on := ns.Networks[network]; on {
			return nil
		}
	}
	_, err = r.engine.NetworkConnect(ctx, network, client.NetworkConnectOptions{
		Container: res.Container.ID, EndpointConfig: &apinetwork.EndpointSettings{Aliases: []string{alias}},
	})
	if err != nil && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("joining the network %s: %w", network, err)
	}
	return nil
}

// Address implements workerruntime.Networker: the worker's address on network.
func (r *Runtime) Address(ctx context.Context, h workerruntime.Handle, network string) (string, error) {
	res, err := r.engine.ContainerInspect(ctx, h.ID, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return "", workerruntime.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("inspecting container %s: %w", h.ID, err)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		if ep, ok := ns.Networks[network]; ok && ep != nil && ep.IPAddress.IsValid() {
			return ep.IPAddress.String(), nil
		}
	}
	return "", errors.New("the worker has no address on network " + network)
}
