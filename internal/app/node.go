package app

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// nodeWaitTimeout is how long to wait for this Node at start, as upstream.
const nodeWaitTimeout = 5 * time.Minute

// nodeView is the latest state of this node, as the syncers need it. The
// node watcher writes it; every family's syncer reads it before a sync.
type nodeView struct {
	mu        sync.Mutex
	node      desired.Node
	known     bool
	bindAddr  netip.Addr
	hostAddrs func() []netip.Addr
}

func newNodeView(name string, bindAddr netip.Addr) *nodeView {
	return &nodeView{node: desired.Node{Name: name}, bindAddr: bindAddr,
		hostAddrs: func() []netip.Addr { return interfaceAddrs(nil) }}
}

// set records what the Node object says about this node.
func (v *nodeView) set(info watch.NodeInfo) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.node.IPs = withBindAddress(info.IPs, v.bindAddr)
	v.node.Zone = info.Zone
	v.node.PodCIDRs = info.PodCIDRs
	v.known = true
}

// setServiceCIDRs records the cluster's service ranges (ServiceCIDR objects).
func (v *nodeView) setServiceCIDRs(cidrs []netip.Prefix) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.node.ServiceCIDRs = cidrs
}

// setClusterNodeIPs records every Node's addresses (--watch-node-addresses).
func (v *nodeView) setClusterNodeIPs(addrs []netip.Addr) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.node.ClusterNodeIPs = addrs
}

// setPeers records the nodes that decapsulate DSR tunnels (--bpf-dsr).
func (v *nodeView) setPeers(peers []watch.Peer) {
	out := make([]desired.Peer, 0, len(peers))
	for _, p := range peers {
		out = append(out, desired.Peer{Name: p.Name, IPs: p.IPs})
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.node.Peers = out
}

// setClusterSources records every Node's addresses and pod CIDRs
// (--bpf-dsr).
func (v *nodeView) setClusterSources(sources []netip.Prefix) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.node.ClusterSources = sources
}

func (v *nodeView) setZone(zone string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.node.Zone = zone
}

// get returns the node for Compute, with the host's current interface
// addresses (in the daemon, from a klink.AddrCache: listed again after the
// kernel announces a change), or false while the Node is unknown.
func (v *nodeView) get() (desired.Node, bool) {
	v.mu.Lock()
	n, ok := v.node, v.known
	v.mu.Unlock()
	if !ok {
		return desired.Node{}, false
	}
	n.HostAddrs = v.hostAddrs()
	return n, true
}

// withBindAddress puts a specified bindAddress first: upstream takes it as
// the primary node IP.
func withBindAddress(ips []netip.Addr, bindAddr netip.Addr) []netip.Addr {
	if !bindAddr.IsValid() || bindAddr.IsUnspecified() {
		return ips
	}
	out := []netip.Addr{bindAddr.Unmap()}
	for _, ip := range ips {
		if ip != out[0] {
			out = append(out, ip)
		}
	}
	return out
}

// interfaceAddrs lists the addresses configured on this network namespace's
// interfaces; nodePortAddresses CIDRs select among them (and, in IPVS mode,
// desired binds node ports to them: NodePortAddrs.Bound). This is the one
// place that reads them. The links in skip are left out: the modes' own
// (backends.Registry.Links; IPVS's dummy link holds every service IP,
// which is not the node's, and upstream excludes them from node-port
// addresses too), whose addresses counted would make every Service change
// look like a node change.
func interfaceAddrs(skip []string) []netip.Addr {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, iface := range ifaces {
		if slices.Contains(skip, iface.Name) {
			continue
		}
		out = append(out, addrsOfInterface(iface)...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// addrsOfInterface lists the addresses configured on iface, none if they
// cannot be read.
func addrsOfInterface(iface net.Interface) []netip.Addr {
	addrs, err := iface.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// needPodCIDRs says whether this node's podCIDRs are part of the
// configuration (NodeCIDR local detection), so that they must exist at start
// and a change to them restarts the process.
func needPodCIDRs(cfg *config.Config) bool {
	return cfg.DetectLocalMode == config.LocalModeNodeCIDR
}

// awaitNode blocks until this Node exists with IPs, then starts watching it.
func (d *daemon) awaitNode(ctx context.Context) (*watch.NodeWatcher, error) {
	w := watch.NewNodeWatcher(d.client, d.nodeName, d.cfg.ConfigSyncPeriod)
	info, err := w.WaitForNode(ctx, nodeWaitTimeout, needPodCIDRs(d.cfg))
	if err != nil {
		return nil, fmt.Errorf("waiting for Node %q: %w", d.nodeName, err)
	}
	d.node.set(info)
	d.health.SetNodeEligible(info.Eligible)
	d.logger.Info("Found this node", "node", d.nodeName, "ips", info.IPs, "zone", info.Zone)
	d.nodeInfo = info
	return w, nil
}

// initialLister is a cluster-wide watch whose initial list the first sync
// waits for (watch.ServiceCIDRs, watch.NodeAddresses).
type initialLister interface {
	WaitForInitialList(ctx context.Context, timeout time.Duration) bool
}

// watchClusterLists follows the ServiceCIDR objects in every mode, as
// upstream (desired decides what to do with them: Options.DropUnallocated),
// with --watch-node-addresses every Node's addresses, and with --bpf-dsr
// the DSR peers (every Node and the Leases of --bpf-dsr-namespace). It
// returns the watches by what they follow.
func (d *daemon) watchClusterLists(ctx context.Context, syncers map[proxy.IPFamily]*syncer.Syncer) (map[string]initialLister, error) {
	requestAll := func() {
		for _, s := range syncers {
			s.Request()
		}
	}
	cidrs := watch.NewServiceCIDRs(d.client, d.cfg.ConfigSyncPeriod, func(cidrs []netip.Prefix) {
		d.node.setServiceCIDRs(cidrs)
		requestAll()
	})
	if err := cidrs.Start(ctx); err != nil {
		return nil, fmt.Errorf("watching ServiceCIDRs: %w", err)
	}
	lists := map[string]initialLister{"ServiceCIDRs": cidrs}
	if !d.cfg.WatchNodeAddresses && !d.cfg.BPFDSR {
		return lists, nil
	}
	// One informer on every Node serves both watches.
	nodes, err := watch.NewClusterNodes(d.client, d.cfg.ConfigSyncPeriod)
	if err != nil {
		return nil, fmt.Errorf("watching Nodes: %w", err)
	}
	// A Node joining or a peer changing changes no input the syncer
	// compares: Compute redecides in an ordinary partial sync.
	if d.cfg.WatchNodeAddresses {
		addrs := watch.NewNodeAddresses(d.client, d.cfg.ConfigSyncPeriod, func(addrs []netip.Addr) {
			d.node.setClusterNodeIPs(addrs)
			requestAll()
		})
		if err := addrs.StartOn(ctx, nodes); err != nil {
			return nil, fmt.Errorf("watching Node addresses: %w", err)
		}
		lists["Node addresses"] = addrs
	}
	if d.cfg.BPFDSR {
		peers := watch.NewPeers(d.client, d.cfg.ConfigSyncPeriod, d.cfg.BPFDSRNamespace, d.nodeName, func(p []watch.Peer) {
			d.node.setPeers(p)
			requestAll()
		})
		if err := peers.StartOn(ctx, nodes); err != nil {
			return nil, fmt.Errorf("watching DSR peers: %w", err)
		}
		lists["DSR peers"] = peers
		// Clients inside the cluster are never tunnelled.
		sources := watch.NewClusterSources(d.client, d.cfg.ConfigSyncPeriod, func(s []netip.Prefix) {
			d.node.setClusterSources(s)
			requestAll()
		})
		if err := sources.StartOn(ctx, nodes); err != nil {
			return nil, fmt.Errorf("watching cluster sources: %w", err)
		}
		lists["cluster sources"] = sources
	}
	nodes.Start(ctx)
	return lists, nil
}

// initialListWait bounds how long the first sync waits for each
// cluster-wide list. They are small beside the Services' and
// EndpointSlices' and normally arrive first; the bound only matters when
// the API server does not serve one (or does not allow it to this client).
const initialListWait = 5 * time.Second

// awaitInitialLists holds the first sync until the cluster-wide lists are
// known, so that it does not program the node without them and a moment
// later with them (at a restart: rules deleted and written back; another
// Node's address served as an external IP for a moment).
func (d *daemon) awaitInitialLists(ctx context.Context, lists map[string]initialLister) {
	for what, w := range lists {
		if !w.WaitForInitialList(ctx, initialListWait) && ctx.Err() == nil {
			d.logger.Info("Starting without a list: it did not arrive in time; it applies once it does",
				"list", what, "waited", initialListWait)
		}
	}
}

// watchNode follows this Node: eligibility feeds /healthz, a zone change
// re-evaluates topology everywhere, and the changes upstream answers by
// exiting (IPs, podCIDRs in NodeCIDR mode, deletion) stop the process.
func (d *daemon) watchNode(ctx context.Context, w *watch.NodeWatcher, syncers map[proxy.IPFamily]*syncer.Syncer) error {
	return w.Start(ctx, d.nodeInfo, needPodCIDRs(d.cfg), watch.NodeHandler{
		Fatal: func(err error) { d.fatal <- err },
		ZoneChanged: func(zone string) {
			d.node.setZone(zone)
			for _, s := range syncers {
				s.RequestFull()
			}
		},
		EligibilityChanged: d.health.SetNodeEligible,
	})
}
