package desired

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// benchWorld builds services × endpointsPer service ports (TCP, NodePort,
// half of them with an external IP) with endpoints spread over two nodes.
func benchWorld(services, endpointsPer int) (map[proxy.ServicePortName]*model.ServicePort, map[proxy.ServicePortName][]model.Endpoint) {
	svcs := make(map[proxy.ServicePortName]*model.ServicePort, services)
	eps := make(map[proxy.ServicePortName][]model.Endpoint, services)
	for i := range services {
		name := portName(fmt.Sprintf("svc-%05d", i), proxy.TCP)
		svcs[name] = &model.ServicePort{
			Name: name, Port: 80, NodePort: uint16(30000 + i%2000),
			ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{172, 30, byte(i >> 8), byte(i)})},
		}
		if i%2 == 0 {
			svcs[name].ExternalIPs = []netip.Addr{netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)})}
		}
		list := make([]model.Endpoint, endpointsPer)
		for j := range list {
			node := "node-b"
			if j%5 == 0 {
				node = "node-a"
			}
			list[j] = readyEP(netip.AddrFrom4([4]byte{10, byte(j), byte(i >> 8), byte(i)}).String(), node)
		}
		eps[name] = list
	}
	return svcs, eps
}

func BenchmarkComputeFull10kx10(b *testing.B) {
	svcs, eps := benchWorld(10000, 10)
	snap := &model.Snapshot{Family: proxy.IPv4, Services: model.NewPortMap(svcs), Endpoints: endpointMap(eps)}
	b.ReportAllocs()
	for b.Loop() {
		if st := Compute(nil, snap, model.Changes{}, testNode, v4Options()); st.Services.Len() != 10000 {
			b.Fatalf("got %d service ports", st.Services.Len())
		}
	}
}

// BenchmarkComputeOneChange10kx10 alternates between two snapshots that
// differ in one service port's endpoints, so every Compute is incremental
// with exactly one changed port. The port has an external IP whose claim
// stays as it was, so the frontend contest (claims.go) is kept: the cost is
// O(changes).
func BenchmarkComputeOneChange10kx10(b *testing.B) { benchOneChange(b, "svc-00042", false) }

// BenchmarkComputeOneChangeNoClaims10kx10 changes a port without external
// or LB IPs.
func BenchmarkComputeOneChangeNoClaims10kx10(b *testing.B) { benchOneChange(b, "svc-00043", false) }

// BenchmarkComputeOneClaimChange10kx10 moves a port's external IP: the
// contest is decided again over every Service.
func BenchmarkComputeOneClaimChange10kx10(b *testing.B) { benchOneChange(b, "svc-00042", true) }

// BenchmarkComputeOneChangeHealthChecks10kx10 changes the endpoints of
// one port when every Service is an eTP=Local LoadBalancer with a health
// check node port: only that service's health check is recounted.
func BenchmarkComputeOneChangeHealthChecks10kx10(b *testing.B) {
	svcs, eps := benchWorld(10000, 10)
	for name, sp := range svcs {
		local := *sp
		local.ExternalLocal, local.HealthCheckNodePort = true, 31000
		local.LoadBalancerIPs = []netip.Addr{netip.AddrFrom4([4]byte{203, 0, local.ClusterIPs[0].As4()[2], local.ClusterIPs[0].As4()[3]})}
		svcs[name] = &local
	}
	benchOneChangeIn(b, svcs, eps, "svc-00043", false)
}

func benchOneChange(b *testing.B, changed string, claim bool) {
	svcs, eps := benchWorld(10000, 10)
	benchOneChangeIn(b, svcs, eps, changed, claim)
}

func benchOneChangeIn(b *testing.B, svcs map[proxy.ServicePortName]*model.ServicePort, eps map[proxy.ServicePortName][]model.Endpoint,
	changed string, claim bool) {
	snapA := &model.Snapshot{Family: proxy.IPv4, Services: model.NewPortMap(svcs), Endpoints: endpointMap(eps)}
	changedName := portName(changed, proxy.TCP)
	if claim {
		moved := *svcs[changedName]
		moved.ExternalIPs = []netip.Addr{netip.MustParseAddr("203.0.113.42")}
		svcs[changedName] = &moved
	} else {
		eps[changedName] = eps[changedName][1:]
	}
	snapB := &model.Snapshot{Family: proxy.IPv4, Services: model.NewPortMap(svcs), Endpoints: endpointMap(eps)}
	changes := model.Changes{Changed: map[proxy.ServicePortName]struct{}{changedName: {}}}
	state := Compute(nil, snapA, model.Changes{}, testNode, v4Options())
	snaps := [2]*model.Snapshot{snapB, snapA}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		state = Compute(state, snaps[i%2], changes, testNode, v4Options())
		if len(state.Changed) != 1 {
			b.Fatalf("Changed = %v, want the one port", state.Changed)
		}
		i++
	}
}
