package main

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// The synthetic cluster is the one of test/bench/nftables (so the numbers
// compare): S services, each one TCP port with a cluster IP, a node port and
// endpointsPerService endpoints, eTP/iTP Cluster, no affinity. Addresses
// come from the test ranges only.
const endpointsPerService = 10

var (
	benchNodeIP   = netip.MustParseAddr("198.19.254.10") // outside the endpoint range below
	benchPodCIDR  = netip.MustParsePrefix("198.18.0.0/15")
	benchSvcBase  = netip.MustParseAddr("172.30.0.0")
	benchEPBase   = netip.MustParseAddr("198.18.0.0")
	firstNodePort = 10000
	maxServices   = 12000 // endpoints stay below 198.19.254.0, node ports below 65536
)

func serviceName(i int) proxy.ServicePortName {
	return proxy.ServicePortName{
		ServiceName: proxy.ServiceName{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)},
		Port:        "http",
		Protocol:    proxy.TCP,
	}
}

// addrAt returns base + n for an IPv4 base.
func addrAt(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func dispatch(eps []desired.Endpoint) desired.Dispatch {
	slices.SortFunc(eps, func(a, b desired.Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) })
	return desired.Dispatch{Endpoints: eps, Empty: desired.Reject}
}

func makeServicePort(i int) *desired.ServicePort {
	eps := make([]desired.Endpoint, endpointsPerService)
	for j := range eps {
		eps[j] = desired.Endpoint{IP: addrAt(benchEPBase, i*endpointsPerService+j), Port: 8080}
	}
	d := dispatch(eps)
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

// buildState returns a full State (Changed nil) with services 0..n-1. Node
// ports go on every node address: the benchmark namespace has one.
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
	for i := range n {
		sp := makeServicePort(i)
		st.Services[sp.Name] = sp
	}
	return st, nil
}

// withEndpointMoved returns prev with service i's first endpoint replaced
// by a fresh address (a pod rescheduled), Changed naming only that
// service, as the syncer hands it over after one event.
func withEndpointMoved(prev *desired.State, i, generation int) *desired.State {
	old := prev.Services[serviceName(i)]
	sp := *old
	eps := slices.Clone(old.Internal.Endpoints)
	eps[0] = desired.Endpoint{IP: addrAt(netip.MustParseAddr("198.19.255.0"), generation%250+1), Port: 9090}
	d := dispatch(eps)
	sp.Internal, sp.External, sp.Cluster = d, d, d
	next := *prev
	next.Services = maps.Clone(prev.Services)
	next.Services[sp.Name] = &sp
	next.Changed = map[proxy.ServicePortName]struct{}{sp.Name: {}}
	return &next
}

// fullSync returns st with Changed cleared: "reconcile everything".
func fullSync(st *desired.State) *desired.State {
	next := *st
	next.Changed = nil
	return &next
}
