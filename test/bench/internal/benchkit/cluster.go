// Package benchkit is what the backend benchmarks under test/bench share:
// the synthetic cluster they program (so their numbers compare), the
// measurement of one operation's wall and CPU time, and the pieces of
// their Markdown reports and command lines that are the same.
package benchkit

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The synthetic cluster: S services in one namespace, each with one TCP
// port, a cluster IP, a node port, and EndpointsPerService endpoints, all
// eTP/iTP Cluster, no affinity. This is the shape of the targets in
// reference/peers-and-numbers.md §5 (G1, G4, G7). Addresses come from the
// test ranges only; nothing in a benchmark's namespace routes anywhere.
const EndpointsPerService = 10

// MaxServices keeps cluster IPs in 172.30/16 and node ports below 65536.
const MaxServices = 55000

// NodeIP is the node address the nftables and iptables benchmarks put in
// their States (the IPVS one has its own, outside the endpoint range).
var NodeIP = netip.MustParseAddr("198.18.0.10")

var (
	podCIDR       = netip.MustParsePrefix("198.18.0.0/15")
	serviceBase   = netip.MustParseAddr("172.30.0.0")
	endpointBase  = netip.MustParseAddr("198.18.0.0")
	firstNodePort = 10000
)

// ServiceName is the name of service port i.
func ServiceName(i int) proxy.ServicePortName {
	return proxy.ServicePortName{
		ServiceName: proxy.ServiceName{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)},
		Port:        "http",
		Protocol:    proxy.TCP,
	}
}

// AddrAt returns base + n (n < 2^32) for an IPv4 base.
func AddrAt(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// endpointAt spreads endpoint number n over 198.18.0.0/15, moving to the
// next target port when the range wraps, so every (ip, port) is unique.
func endpointAt(n int) desired.Endpoint {
	const rangeSize = 1 << 17
	return desired.Endpoint{IP: AddrAt(endpointBase, n%rangeSize), Port: uint16(8080 + n/rangeSize)}
}

// MakeServicePort returns service port i of the synthetic cluster.
func MakeServicePort(i int) *desired.ServicePort {
	eps := make([]desired.Endpoint, EndpointsPerService)
	for j := range eps {
		eps[j] = endpointAt(i*EndpointsPerService + j)
	}
	slices.SortFunc(eps, compareEndpoints)
	d := desired.Dispatch{Endpoints: eps, Empty: desired.Reject}
	return &desired.ServicePort{
		Name:      ServiceName(i),
		Protocol:  proxy.TCP,
		Port:      80,
		ClusterIP: AddrAt(serviceBase, i+1),
		NodePort:  uint16(firstNodePort + i),
		Internal:  d,
		External:  d,
		Cluster:   d,
	}
}

func compareEndpoints(a, b desired.Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) }

// BuildState returns a full State (Changed nil: a full sync) with services
// 0..n-1 on a node with address nodeIP. Node ports go on every node
// address.
func BuildState(n int, nodeIP netip.Addr) (*desired.State, error) {
	if n > MaxServices {
		return nil, fmt.Errorf("at most %d services", MaxServices)
	}
	st := &desired.State{
		Family:  proxy.IPv4,
		NodeIPs: []netip.Addr{nodeIP},
		// Bound: the node's one address beside loopback, where IPVS
		// binds node ports (desired resolves it from the host's addresses).
		NodePorts: desired.NodePortAddrs{All: true, Bound: []netip.Addr{nodeIP}},
		Masquerade: desired.Masquerade{
			Mark:  1 << 14,
			Local: desired.LocalDetector{Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{podCIDR}},
		},
	}
	var services model.PortMapEditor[*desired.ServicePort]
	for i := 0; i < n; i++ {
		sp := MakeServicePort(i)
		services.Set(sp.Name, sp)
	}
	st.Services = services.Done()
	return st, nil
}

// WithService returns a copy of prev where service sp is replaced (or
// added), with Changed naming only it, as the syncer would hand it over
// after one event.
func WithService(prev *desired.State, sp *desired.ServicePort) *desired.State {
	next := *prev
	services := model.NewPortMapEditor(prev.Services)
	services.Set(sp.Name, sp)
	next.Services = services.Done()
	next.Changed = map[proxy.ServicePortName]struct{}{sp.Name: {}}
	return &next
}

// WithEndpointMoved returns prev with service i's first endpoint replaced
// by a fresh address (a pod rescheduled), Changed naming only that service.
func WithEndpointMoved(prev *desired.State, i, generation int) *desired.State {
	old := prev.Service(ServiceName(i))
	sp := *old
	eps := slices.Clone(old.Internal.Endpoints)
	eps[0] = desired.Endpoint{IP: AddrAt(netip.MustParseAddr("198.19.255.0"), generation%250+1), Port: 9090}
	slices.SortFunc(eps, compareEndpoints)
	d := desired.Dispatch{Endpoints: eps, Empty: desired.Reject}
	sp.Internal, sp.External, sp.Cluster = d, d, d
	return WithService(prev, &sp)
}

// FullSync returns st with Changed cleared: "reconcile everything".
func FullSync(st *desired.State) *desired.State {
	next := *st
	next.Changed = nil
	return &next
}
