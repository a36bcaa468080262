package desired

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// An external or LB IP equal to a node address would take the node's own
// traffic on that port: another Service's node port, the kubelet. It is
// refused, and the Service is told why; an ordinary external IP still works.
func TestNodeAddressFrontendsRefused(t *testing.T) {
	nodeIP := testNode.IPs[0] // 192.168.0.2
	squatter := svcPort("squatter", addrs("172.30.0.20"), func(sp *model.ServicePort) {
		sp.Port = 30080 // another Service's node port
		sp.ExternalIPs = addrs("192.168.0.2", "198.51.100.7")
	})
	kubelet := svcPort("kubelet", addrs("172.30.0.21"), func(sp *model.ServicePort) {
		sp.Port = 10250
		sp.LoadBalancerIPs = addrs("192.168.0.2", "192.0.2.9")
	})
	victim := svcPort("victim", addrs("172.30.0.22"), func(sp *model.ServicePort) { sp.NodePort = 30080 })
	snap := snapshot(proxy.IPv4, snapEntry{sp: squatter}, snapEntry{sp: kubelet}, snapEntry{sp: victim})
	st := Compute(nil, snap, model.Changes{}, testNode, v4Options())

	if got := st.Service(squatter.Name).ExternalIPs; !slices.Equal(got, addrs("198.51.100.7")) {
		t.Errorf("external IPs %v, want only 198.51.100.7 (the node IP refused)", got)
	}
	if got := st.Service(kubelet.Name).LoadBalancerIPs; !slices.Equal(got, addrs("192.0.2.9")) {
		t.Errorf("LB IPs %v, want only 192.0.2.9 (the node IP refused)", got)
	}
	for name, kind := range map[proxy.ServicePortName]FrontendKind{squatter.Name: ClaimExternalIP, kubelet.Name: ClaimLoadBalancerIP} {
		want := []LostFrontend{{Addr: nodeIP, Kind: kind, Refused: RefusedNodeAddress}}
		if got := st.Lost[name]; !slices.Equal(got, want) {
			t.Errorf("Lost[%s] = %v, want %v", name, got, want)
		}
	}
	out := Evaluate(st, Packet{Source: netip.MustParseAddr("203.0.113.5"), Dest: nodeIP, Protocol: proxy.TCP, DestPort: 30080, DestLocal: true})
	if out.Port == nil || out.Port.Name != victim.Name || out.Frontend != NodePortFrontend {
		t.Errorf("node IP:30080 reaches %+v, want the node port of %s", out.Port, victim.Name)
	}
}

// Another Node's address as an external or LB IP is refused like this
// node's own once the daemon watches every Node (Node.ClusterNodeIPs): in
// IPVS mode it would be bound on every node's kube-ipvs0 and cut that Node
// off. Without the watch it is served, as documented. The refusal comes
// before any contest: what the Services also claim elsewhere still goes to
// the oldest.
func TestOtherNodesAddressesRefused(t *testing.T) {
	otherNode := netip.MustParseAddr("192.168.0.3")
	created := int64(1_700_000_000)
	claimant := func(name string, age int64) *model.ServicePort {
		return svcPort(name, addrs("172.30.0."+name[1:]), func(sp *model.ServicePort) {
			sp.Created = created - age
			sp.ExternalIPs = addrs("192.168.0.3", "198.51.100.9")
			sp.LoadBalancerIPs = addrs("fd00:1::3")
		})
	}
	// Names sorting against age: the old Service's name sorts last.
	old, young := claimant("z30", 3600), claimant("a31", 0)
	snap := snapshot(proxy.IPv4, snapEntry{sp: old}, snapEntry{sp: young})

	withWatch := testNode
	withWatch.ClusterNodeIPs = addrs("192.168.0.2", "192.168.0.3", "192.168.0.4", "fd00:1::3")
	st := Compute(nil, snap, model.Changes{}, withWatch, v4Options())
	if got := st.Service(old.Name).ExternalIPs; !slices.Equal(got, addrs("198.51.100.9")) {
		t.Errorf("the old Service's external IPs %v, want only 198.51.100.9 (the other Node's refused)", got)
	}
	if got := st.Service(young.Name).ExternalIPs; len(got) != 0 {
		t.Errorf("the young Service's external IPs %v, want none (refused, and lost to the older)", got)
	}
	refused := LostFrontend{Addr: otherNode, Kind: ClaimExternalIP, Refused: RefusedNodeAddress}
	for name, want := range map[proxy.ServicePortName][]LostFrontend{
		old.Name:   {refused},
		young.Name: {refused, {Addr: netip.MustParseAddr("198.51.100.9"), Kind: ClaimExternalIP, Winner: old.Name}},
	} {
		if got := st.Lost[name]; !slices.Equal(got, want) {
			t.Errorf("Lost[%s] = %v, want %v", name, got, want)
		}
	}
	if !slices.Equal(st.NodeIPs, addrs("192.168.0.2")) {
		t.Errorf("NodeIPs %v: other Nodes' addresses must not become this node's", st.NodeIPs)
	}

	without := Compute(nil, snap, model.Changes{}, testNode, v4Options())
	if got := without.Service(old.Name).ExternalIPs; !slices.Equal(got, addrs("192.168.0.3", "198.51.100.9")) {
		t.Errorf("without the Node watch, external IPs %v, want the other Node's served", got)
	}
}

// A Node joining or leaving changes no node or option that the syncer
// compares, so Compute is handed the previous State: it must redecide the
// refusals itself and rebuild only the ports whose frontends changed.
func TestClusterNodeIPsChangeIsIncremental(t *testing.T) {
	squatter := svcPort("squatter", addrs("172.30.0.40"), func(sp *model.ServicePort) {
		sp.ExternalIPs = addrs("192.168.0.5")
	})
	bystander := svcPort("bystander", addrs("172.30.0.41"), nil)
	snap := snapshot(proxy.IPv4, snapEntry{sp: squatter}, snapEntry{sp: bystander})
	before := Compute(nil, snap, model.Changes{}, testNode, v4Options())

	joined := testNode
	joined.ClusterNodeIPs = addrs("192.168.0.2", "192.168.0.5")
	after := Compute(before, snap, model.Changes{}, joined, v4Options())
	if got := after.Service(squatter.Name).ExternalIPs; len(got) != 0 {
		t.Errorf("after the Node with 192.168.0.5 joined, external IPs %v, want none", got)
	}
	if _, ok := after.Changed[squatter.Name]; !ok || len(after.Changed) != 1 {
		t.Errorf("Changed = %v, want only %s", after.Changed, squatter.Name)
	}

	left := Compute(after, snap, model.Changes{}, testNode, v4Options())
	if got := left.Service(squatter.Name).ExternalIPs; !slices.Equal(got, addrs("192.168.0.5")) {
		t.Errorf("after the Node left, external IPs %v, want 192.168.0.5 back", got)
	}
	if len(left.Lost) != 0 {
		t.Errorf("Lost = %v after the Node left, want none", left.Lost)
	}
}
