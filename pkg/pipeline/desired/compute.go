package desired

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Compute returns the desired State of one IP family (opts.Family, or
// snap.Family when unset) for snap on node with opts. It is pure: it reads
// its inputs and never modifies them, prev included.
//
// With prev nil it computes everything and the State's Changed is nil, which
// tells the backend to reconcile fully. With prev non-nil it recomputes only
// the service ports in changes.Changed (and those whose contested frontends
// changed hands, see claims.go), shares every other *ServicePort with prev,
// and sets Changed to the ports that were added, removed or now differ.
// prev must have been computed for the same node and options: the caller
// passes nil whenever either changed, because node IPs, zone, podCIDRs and
// every option can change every port; node.ClusterNodeIPs may differ from
// prev's (Compute then redecides refusals), and so may node.Peers (it then
// redecides the ports with a DSR). Node ports, masquerade and node IPs are
// recomputed on every call either way; they are cheap.
func Compute(prev *State, snap *model.Snapshot, changes model.Changes, node Node, opts Options) *State {
	if snap == nil {
		snap = &model.Snapshot{}
	}
	family := opts.Family
	if family == "" {
		family = snap.Family
	}
	in := portInputs{family: family, node: node, nodeIPs: nodeIPsOf(node.IPs, family), masq: masquerade(opts, family, node),
		settings: opts.PortSettings, balancing: opts.ExternalBalancing, forwarding: opts.ExternalForwarding,
		dsr: dsrInputsOf(opts, node, family)}
	if in.balancing == proxy.BalanceDefault {
		in.balancing = proxy.BalanceRandom
	}
	if in.forwarding == proxy.ForwardDefault {
		in.forwarding = proxy.ForwardSNAT
	}
	state := &State{
		Family:         family,
		NodeIPs:        in.nodeIPs,
		NodePorts:      nodePortAddrs(opts, family, node),
		Masquerade:     in.masq,
		Peers:          peerAddrsOf(opts, node, family),
		ClusterSources: clusterSourcesOf(prev, opts, node, in.masq, family),
		// Shared, not copied: Compute never modifies its inputs.
		clusterNodeIPs: node.ClusterNodeIPs,
		peers:          node.Peers,
		clusterSources: node.ClusterSources,
		claimedFrom:    snap.Services,
	}
	nodes := nodeAddrs{own: in.nodeIPs, cluster: node.ClusterNodeIPs}
	if opts.DropUnallocated {
		state.ServiceCIDRs = serviceCIDRsOf(node.ServiceCIDRs, family)
	}
	if prev == nil {
		state.Lost, state.claims = lostFrontends(snap, family, nodes)
		state.Services = computeAll(snap, in, state.Lost)
		state.HealthChecks, state.healthPorts = healthChecks(state.Services, snap, family, node)
		return state
	}
	rebuild := changes.Changed
	// Other Nodes come and go with the cluster's size: their addresses
	// only decide refusals, so a change to them redecides the contest and
	// rebuilds the ports whose losses changed, not every port.
	if slices.Equal(prev.clusterNodeIPs, node.ClusterNodeIPs) && claimsUnchanged(prev, snap, changes.Changed, family) {
		state.Lost, state.claims = prev.Lost, prev.claims
	} else {
		state.Lost, state.claims = lostFrontends(snap, family, nodes)
	}
	if len(state.Lost) > 0 || len(prev.Lost) > 0 {
		// A claim won or lost elsewhere changes these ports too.
		rebuild = maps.Clone(changes.Changed)
		if rebuild == nil {
			rebuild = map[proxy.ServicePortName]struct{}{}
		}
		lossesChanged(prev.Lost, state.Lost, rebuild)
	}
	// A peer coming or going changes the tunnels of every DSR port.
	rebuild = dsrRebuild(prev, node, opts.DSR, rebuild)
	state.Services, state.Changed = computeChanged(prev.Services, snap, rebuild, in, state.Lost)
	// Every changed input, not only state.Changed: a local endpoint going from
	// ready to terminating can leave the port's rules equal (traffic falls back
	// to it) while its health check count must drop.
	state.HealthChecks, state.healthPorts = updateHealthChecks(prev, changes.Changed, state.Services, snap, node)
	return state
}

// portInputs is what every service port of one Compute is decided from,
// besides its own model values.
type portInputs struct {
	family   proxy.IPFamily
	node     Node
	nodeIPs  []netip.Addr
	masq     Masquerade
	settings PortSettings
	// balancing is the node's default for external traffic, resolved.
	balancing proxy.Balancing
	// forwarding is the node's default forwarding of external traffic to
	// other nodes, resolved.
	forwarding proxy.Forwarding
	dsr        dsrInputs
}

func computeAll(snap *model.Snapshot, in portInputs, lost map[proxy.ServicePortName][]LostFrontend) model.PortMap[*ServicePort] {
	var services model.PortMapEditor[*ServicePort]
	for name, sp := range snap.Services.All() {
		eps, _ := snap.Endpoints.Get(name)
		if out := buildServicePort(sp, eps, in, lost[name]); out != nil {
			services.Set(name, out)
		}
	}
	return services.Done()
}

// computeChanged derives a new map from prev's (never modifying it, see
// model.PortMap: only the shards holding a changed port are copied) and
// rebuilds only the changed ports. A rebuilt port equal to its predecessor
// keeps the old pointer and stays out of the changed set, so a backend is
// not asked to touch what it already has.
func computeChanged(prev model.PortMap[*ServicePort], snap *model.Snapshot, rebuild map[proxy.ServicePortName]struct{},
	in portInputs, lost map[proxy.ServicePortName][]LostFrontend,
) (model.PortMap[*ServicePort], map[proxy.ServicePortName]struct{}) {
	services := model.NewPortMapEditor(prev)
	changed := map[proxy.ServicePortName]struct{}{}
	for name := range rebuild {
		var next *ServicePort
		if sp, ok := snap.Services.Get(name); ok {
			eps, _ := snap.Endpoints.Get(name)
			next = buildServicePort(sp, eps, in, lost[name])
		}
		old, _ := prev.Get(name)
		switch {
		case next == nil && old == nil:
		case next == nil:
			services.Remove(name)
			changed[name] = struct{}{}
		case next.Equal(old):
		default:
			services.Set(name, next)
			changed[name] = struct{}{}
		}
	}
	return services.Done(), changed
}

// serviceCIDRsOf: the prefixes of family, none inside another (nft
// refuses overlapping elements of one set).
func serviceCIDRsOf(cidrs []netip.Prefix, family proxy.IPFamily) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range cidrs {
		if p.IsValid() && family.Contains(p.Addr()) {
			out = append(out, p.Masked())
		}
	}
	return coverPrefixes(out)
}

// nodeIPsOf keeps the node IPs of family, in order (primary first), without
// duplicates.
func nodeIPsOf(ips []netip.Addr, family proxy.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		ip = ip.Unmap()
		if family.Contains(ip) && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}
