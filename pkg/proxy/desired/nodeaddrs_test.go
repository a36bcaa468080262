package desired

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
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
