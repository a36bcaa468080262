package main

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// The synthetic cluster: S services in one namespace, each with one TCP
// port, a cluster IP, a node port, and endpointsPerService endpoints, all
// eTP/iTP Cluster, no affinity: the shape of reference/peers-and-numbers.md
// §5, and the same cluster test/bench/nftables programs, so the backends
// compare on equal terms. Addresses come from the test ranges only;
// nothing in the benchmark's namespace routes anywhere.
const endpointsPerService = 10

var (
	benchNodeIP   = netip.MustParseAddr("198.18.0.10")
	benchPodCIDR  = netip.MustParsePrefix("198.18.0.0/15")
	benchSvcBase  = netip.MustParseAddr("172.30.0.0")
	benchEPBase   = netip.MustParseAddr("198.18.0.0")
	firstNodePort = 10000
	maxServices   = 55000 // keeps cluster IPs in 172.30/16 and node ports < 65536
)

func serviceName(i int) proxy.ServicePortName {
	return proxy.ServicePortName{
		ServiceName: proxy.ServiceName{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)},
		Port:        "http",
		Protocol:    proxy.TCP,
	}
}

// addrAt returns base + n (n < 2^32).
func addrAt(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// endpointAt spreads endpoint number n over 198.18.0.0/15, moving to the
// next target port when the range wraps, so every (ip, port) is unique.
func endpointAt(n int) desired.Endpoint {
	const rangeSize = 1 << 17
	return desired.Endpoint{IP: addrAt(benchEPBase, n%rangeSize), Port: uint16(8080 + n/rangeSize)}
}

func makeServicePort(i int) *desired.ServicePort {
	eps := make([]desired.Endpoint, endpointsPerService)
	for j := range eps {
		eps[j] = endpointAt(i*endpointsPerService + j)
	}
	slices.SortFunc(eps, compareEndpoints)
	d := desired.Dispatch{Endpoints: eps, Empty: desired.Reject}
	return &desired.ServicePort{
		Name:      serviceName(i),
		Protocol:  proxy.TCP,
		Port:      80,
		ClusterIP: addrAt(benchSvcBase, i+1),
		NodePort:  uint16(firstNodePort + i),
		Internal:  d,
		External:  d,
		Cluster:   d,
	}
}

func compareEndpoints(a, b desired.Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) }

// buildState returns a full State (Changed nil: a full sync) with services
// 0..n-1.
func buildState(n int) (*desired.State, error) {
	if n > maxServices {
		return nil, fmt.Errorf("at most %d services", maxServices)
	}
	st := &desired.State{
		Family:    proxy.IPv4,
		NodeIPs:   []netip.Addr{benchNodeIP},
		NodePorts: desired.NodePortAddrs{All: true},
		Masquerade: desired.Masquerade{
			Mark:  1 << 14,
			Local: desired.LocalDetector{Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{benchPodCIDR}},
		},
		Services: make(map[proxy.ServicePortName]*desired.ServicePort, n),
	}
	for i := 0; i < n; i++ {
		sp := makeServicePort(i)
		st.Services[sp.Name] = sp
	}
	return st, nil
}

// withService returns a copy of prev where service i is replaced (or
// added) by sp, with Changed naming only it, as the syncer would hand it
// over after one event.
func withService(prev *desired.State, sp *desired.ServicePort) *desired.State {
	next := *prev
	next.Services = maps.Clone(prev.Services)
	next.Services[sp.Name] = sp
	next.Changed = map[proxy.ServicePortName]struct{}{sp.Name: {}}
	return &next
}

// withEndpointMoved returns prev with service i's first endpoint replaced by
// a fresh address (a pod rescheduled).
func withEndpointMoved(prev *desired.State, i, generation int) *desired.State {
	old := prev.Services[serviceName(i)]
	sp := *old
	eps := slices.Clone(old.Internal.Endpoints)
	eps[0] = desired.Endpoint{IP: addrAt(netip.MustParseAddr("198.19.255.0"), generation%250+1), Port: 9090}
	slices.SortFunc(eps, compareEndpoints)
	d := desired.Dispatch{Endpoints: eps, Empty: desired.Reject}
	sp.Internal, sp.External, sp.Cluster = d, d, d
	return withService(prev, &sp)
}

// fullSync returns st with Changed cleared: "reconcile everything".
func fullSync(st *desired.State) *desired.State {
	next := *st
	next.Changed = nil
	return &next
}
