package desired

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// dsrNode is node-a with peers node-b (both families) and node-d (IPv6
// only), and two Peers that are ignored: one names this node itself, one
// no node (an endpoint without a node is on none).
var dsrNode = func() Node {
	n := testNode
	n.Peers = []Peer{
		{Name: "node-b", IPs: addrs("192.168.0.3", "fd00:1::3", "192.168.9.3")},
		{Name: "node-d", IPs: addrs("fd00:1::4")},
		{Name: "node-a", IPs: addrs("192.168.0.2")},
		{Name: "", IPs: addrs("192.168.0.8")},
	}
	return n
}()

func dsrOptions() Options {
	o := v4Options()
	o.DSR, o.ExternalForwarding = true, proxy.ForwardDSR
	return o
}

// dsrPort is a NodePort service port "web" with endpoints on this node
// (node-a), on the peers node-b and node-d, on node-c (no peer) and
// without a node.
func dsrPort(edit func(*model.ServicePort)) snapEntry {
	sp := svcPort("web", addrs("172.30.0.10"), func(sp *model.ServicePort) {
		sp.NodePort = 30080
		if edit != nil {
			edit(sp)
		}
	})
	return snapEntry{sp: sp, eps: []model.Endpoint{
		readyEP("10.0.1.1", "node-a"), termEP("10.0.1.2", "node-a"),
		readyEP("10.0.2.1", "node-b"), readyEP("10.0.2.2", "node-b"),
		readyEP("10.0.3.1", "node-c"), readyEP("10.0.4.1", "node-d"), readyEP("10.0.5.1", ""),
	}}
}

func dsrState(t *testing.T, node Node, opts Options, entries ...snapEntry) *State {
	t.Helper()
	return Compute(nil, snapshot(proxy.IPv4, entries...), model.Changes{}, node, opts)
}

// A port with forwarding dsr on a node with --bpf-dsr tunnels External's
// endpoints on peers to the peer's first address of the family, and serves
// tunnelled flows with its own endpoints (External's local choice: ready
// first), dropping them when it has none.
func TestDSRTunnelsToPeersOnly(t *testing.T) {
	sp := dsrState(t, dsrNode, dsrOptions(), dsrPort(nil)).Service(portName("web", proxy.TCP))
	want := &DSR{
		Tunnels: []Tunnel{
			{Endpoint: addrs("10.0.2.1")[0], Node: addrs("192.168.0.3")[0], NodeName: "node-b"},
			{Endpoint: addrs("10.0.2.2")[0], Node: addrs("192.168.0.3")[0], NodeName: "node-b"},
		},
		In: Dispatch{Endpoints: endpointsOf("10.0.1.1:8080")},
	}
	if sp.ExternalForwarding != proxy.ForwardDSR || !sp.DSR.Equal(want) {
		t.Errorf("forwarding %q, DSR %+v; want dsr, %+v", sp.ExternalForwarding, sp.DSR, want)
	}

	noLocal := dsrPort(nil)
	noLocal.eps = slices.DeleteFunc(slices.Clone(noLocal.eps), func(e model.Endpoint) bool { return e.NodeName == "node-a" })
	sp = dsrState(t, dsrNode, dsrOptions(), noLocal).Service(portName("web", proxy.TCP))
	if sp.DSR == nil || len(sp.DSR.In.Endpoints) != 0 || sp.DSR.In.Empty != Drop || len(sp.DSR.Tunnels) != 2 {
		t.Errorf("without a local endpoint: DSR %+v, want the same tunnels and In empty, dropping", sp.DSR)
	}
}

// Tunnels follow External: an endpoint that External does not use (not
// ready while others are) is not tunnelled, and one address is tunnelled
// once even when it serves on two ports.
func TestDSRTunnelsFollowExternal(t *testing.T) {
	e := dsrPort(nil)
	e.eps = []model.Endpoint{readyEP("10.0.2.1", "node-b"), termEP("10.0.2.2", "node-b"), readyEP("10.0.2.3", "node-b")}
	second := readyEP("10.0.2.1", "node-b")
	second.Port = 9090
	e.eps = append(e.eps, second)
	sp := dsrState(t, dsrNode, dsrOptions(), e).Service(portName("web", proxy.TCP))
	var got []string
	for _, tn := range sp.DSR.Tunnels {
		got = append(got, tn.Endpoint.String())
	}
	if want := []string{"10.0.2.1", "10.0.2.3"}; !slices.Equal(got, want) {
		t.Errorf("tunnelled %v, want %v (External is %v)", got, want, sp.External.Endpoints)
	}
}

// DSR applies only where the node's datapath tunnels (Options.DSR), to a
// port whose forwarding is dsr (annotation, else the node's default), with
// externalTrafficPolicy Cluster, TCP or UDP, and an external frontend.
// The forwarding is decided and shown either way.
func TestDSRApplies(t *testing.T) {
	for _, tc := range []struct {
		name       string
		node       proxy.Forwarding
		annotation proxy.Forwarding
		noDSR      bool
		edit       func(*model.ServicePort)
		forwarding proxy.Forwarding
		applies    bool
	}{
		{name: "node default dsr", node: proxy.ForwardDSR, forwarding: proxy.ForwardDSR, applies: true},
		{name: "annotation dsr", annotation: proxy.ForwardDSR, forwarding: proxy.ForwardDSR, applies: true},
		{name: "no default", forwarding: proxy.ForwardSNAT},
		{name: "annotation snat over node dsr", node: proxy.ForwardDSR, annotation: proxy.ForwardSNAT, forwarding: proxy.ForwardSNAT},
		{name: "without --bpf-dsr", node: proxy.ForwardDSR, noDSR: true, forwarding: proxy.ForwardDSR},
		{name: "eTP Local", node: proxy.ForwardDSR, edit: func(sp *model.ServicePort) { sp.ExternalLocal = true }, forwarding: proxy.ForwardDSR},
		{name: "UDP", node: proxy.ForwardDSR, edit: func(sp *model.ServicePort) { sp.Name.Protocol = proxy.UDP }, forwarding: proxy.ForwardDSR, applies: true},
		{name: "SCTP", node: proxy.ForwardDSR, edit: func(sp *model.ServicePort) { sp.Name.Protocol = proxy.SCTP }, forwarding: proxy.ForwardDSR},
		{name: "cluster IP only", node: proxy.ForwardDSR, edit: func(sp *model.ServicePort) { sp.NodePort = 0 }, forwarding: proxy.ForwardDSR},
		{name: "LB IP only", node: proxy.ForwardDSR, edit: func(sp *model.ServicePort) {
			sp.NodePort, sp.LoadBalancerIPs = 0, addrs("192.0.2.10")
		}, forwarding: proxy.ForwardDSR, applies: true},
	} {
		opts := dsrOptions()
		opts.ExternalForwarding, opts.DSR = tc.node, !tc.noDSR
		st := dsrState(t, dsrNode, opts, dsrPort(func(sp *model.ServicePort) {
			sp.ExternalForwarding = tc.annotation
			if tc.edit != nil {
				tc.edit(sp)
			}
		}))
		for _, sp := range st.Services.All() {
			if sp.ExternalForwarding != tc.forwarding || (sp.DSR != nil) != tc.applies {
				t.Errorf("%s: forwarding %q, DSR %+v; want %q, applies %t", tc.name, sp.ExternalForwarding, sp.DSR, tc.forwarding, tc.applies)
			}
			if why := DSRApplies(sp, opts.DSR); (why == "") != tc.applies {
				t.Errorf("%s: DSRApplies says %q", tc.name, why)
			}
		}
	}
}

// State.Peers lists every address of the family of the other peers,
// sorted, and nothing without Options.DSR.
func TestDSRStatePeers(t *testing.T) {
	if got := dsrState(t, dsrNode, dsrOptions()).Peers; !slices.Equal(got, addrs("192.168.0.3", "192.168.9.3")) {
		t.Errorf("IPv4 peers %v, want node-b's two addresses", got)
	}
	v6 := dsrOptions()
	v6.Family = proxy.IPv6
	if got := dsrState(t, dsrNode, v6).Peers; !slices.Equal(got, addrs("fd00:1::3", "fd00:1::4")) {
		t.Errorf("IPv6 peers %v, want node-b's and node-d's", got)
	}
	off := dsrOptions()
	off.DSR = false
	if got := dsrState(t, dsrNode, off).Peers; got != nil {
		t.Errorf("without Options.DSR, peers %v", got)
	}
}

// State.ClusterSources holds every Node's addresses and pod CIDRs and the
// detector's cluster CIDRs of the family, masked, sorted, without the
// ones inside another; nothing without Options.DSR; and a Compute with
// the same Node.ClusterSources as prev's keeps prev's, a changed one
// makes it again.
func TestDSRClusterSources(t *testing.T) {
	node := dsrNode
	node.ClusterSources = prefixes("10.0.3.0/24", "10.1.0.0/24", "10.1.0.7/32", "192.168.0.3/32", "192.168.0.2/32",
		"fd00:1::3/128", "10.0.1.5/24")
	prev := dsrState(t, node, dsrOptions())
	want := prefixes("10.0.0.0/16", "10.1.0.0/24", "192.168.0.2/32", "192.168.0.3/32")
	if !slices.Equal(prev.ClusterSources, want) {
		t.Errorf("IPv4 sources %v, want %v", prev.ClusterSources, want)
	}
	for src, in := range map[string]bool{"10.0.200.1": true, "10.1.0.9": true, "192.168.0.3": true, "192.168.0.4": false, "203.0.113.5": false} {
		if got := prev.InCluster(netip.MustParseAddr(src)); got != in {
			t.Errorf("InCluster(%s) = %v, want %v", src, got, in)
		}
	}
	v6 := dsrOptions()
	v6.Family = proxy.IPv6
	if got, want := dsrState(t, node, v6).ClusterSources, prefixes("fd00:1::3/128", "fd00:10::/64"); !slices.Equal(got, want) {
		t.Errorf("IPv6 sources %v, want %v", got, want)
	}
	off := dsrOptions()
	off.DSR = false
	if got := dsrState(t, node, off).ClusterSources; got != nil {
		t.Errorf("without Options.DSR, sources %v", got)
	}
	snap := snapshot(proxy.IPv4, dsrPort(nil))
	inc := Compute(prev, snap, model.Changes{}, node, dsrOptions())
	if len(inc.ClusterSources) == 0 || &inc.ClusterSources[0] != &prev.ClusterSources[0] {
		t.Errorf("the same Node.ClusterSources made the sources again")
	}
	node.ClusterSources = prefixes("192.168.0.4/32")
	if got, want := Compute(prev, snap, model.Changes{}, node, dsrOptions()).ClusterSources,
		prefixes("10.0.0.0/16", "192.168.0.4/32"); !slices.Equal(got, want) {
		t.Errorf("after a Node change, sources %v, want %v", got, want)
	}
}

// A peer coming, going or changing address is no change the syncer sees:
// Compute gets the previous State and must redecide the DSR ports itself,
// and only them.
func TestDSRPeersChangeIsIncremental(t *testing.T) {
	plain := svcPort("plain", addrs("172.30.0.11"), func(sp *model.ServicePort) {
		sp.NodePort, sp.ExternalForwarding = 30081, proxy.ForwardSNAT
	})
	snap := snapshot(proxy.IPv4, dsrPort(nil), snapEntry{sp: plain, eps: []model.Endpoint{readyEP("10.0.2.1", "node-b")}})
	web := portName("web", proxy.TCP)
	prev := Compute(nil, snap, model.Changes{}, dsrNode, dsrOptions())
	for _, peers := range [][]Peer{
		{{Name: "node-c", IPs: addrs("192.168.0.4")}},
		{{Name: "node-b", IPs: addrs("192.168.0.5")}, {Name: "node-c", IPs: addrs("192.168.0.4")}},
		nil,
	} {
		node := dsrNode
		node.Peers = peers
		inc := Compute(prev, snap, model.Changes{}, node, dsrOptions())
		full := Compute(nil, snap, model.Changes{}, node, dsrOptions())
		ctx := fmt.Sprintf("peers %v", peers)
		assertSameState(t, ctx, inc, full)
		if !slices.Equal(inc.Peers, full.Peers) {
			t.Errorf("%s: State.Peers %v, full %v", ctx, inc.Peers, full.Peers)
		}
		if !maps.Equal(inc.Changed, map[proxy.ServicePortName]struct{}{web: {}}) {
			t.Errorf("%s: Changed %v, want only %v", ctx, inc.Changed, web)
		}
		prev = inc
	}
}

// TestDSRIncrementalEqualsFull: random changes of ports, endpoints and
// peers, every port forwarding by dsr, computed incrementally and in full.
func TestDSRIncrementalEqualsFull(t *testing.T) {
	peerSets := [][]Peer{nil, {{Name: "node-b", IPs: addrs("192.168.0.3")}}, {{Name: "node-b", IPs: addrs("192.168.0.9")}}}
	for seed := range uint64(10) {
		w := &randomWorld{rng: rand.New(rand.NewPCG(seed, 2)), svcs: map[proxy.ServicePortName]*model.ServicePort{},
			eps: map[proxy.ServicePortName][]model.Endpoint{}}
		node := testNode
		prev := Compute(nil, w.snapshot(), model.Changes{}, node, dsrOptions())
		for step := range 50 {
			changed := map[proxy.ServicePortName]struct{}{}
			if w.rng.IntN(3) == 0 {
				node.Peers = peerSets[w.rng.IntN(len(peerSets))]
			} else {
				changed[w.mutate()] = struct{}{}
			}
			prev = stepIncremental(t, fmt.Sprintf("seed %d step %d", seed, step), prev, w.snapshot(), changed, node, dsrOptions())
		}
	}
}
