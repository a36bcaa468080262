package main

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The UDP world the table is filled against: udpServices DNS-like services
// (cluster IP :53) with udpEndpoints endpoints each. Flow i goes to service
// i % udpServices; even flows are DNATed to a serving endpoint, odd ones to
// an endpoint that no longer exists. Addresses are test ranges; nothing is
// routed, the entries are only data in the namespace's table.
const (
	udpServices  = 1000
	udpEndpoints = 10
)

var (
	svcBase    = netip.MustParseAddr("172.30.0.0")
	epBase     = netip.MustParseAddr("198.19.0.0")
	clientBase = netip.MustParseAddr("198.18.0.0")
)

type udpWorldT struct {
	state *desired.State
}

func addrAt(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// endpoint k of service s; k ≥ udpEndpoints are the removed ones.
func endpoint(s, k int) netip.AddrPort {
	return netip.AddrPortFrom(addrAt(epBase, s*2*udpEndpoints+k), 53)
}

func udpWorld(int) udpWorldT {
	st := &desired.State{Family: proxy.IPv4, NodePorts: desired.NodePortAddrs{All: true}}
	services := map[proxy.ServicePortName]*desired.ServicePort{}
	for s := 0; s < udpServices; s++ {
		var eps []desired.Endpoint
		for k := 0; k < udpEndpoints; k++ {
			ap := endpoint(s, k)
			eps = append(eps, desired.Endpoint{IP: ap.Addr(), Port: ap.Port()})
		}
		d := desired.Dispatch{Endpoints: eps}
		name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "bench", Name: fmt.Sprintf("dns-%d", s)}, Protocol: proxy.UDP}
		services[name] = &desired.ServicePort{Name: name, Protocol: proxy.UDP, Port: 53,
			ClusterIP: addrAt(svcBase, s+1), Internal: d, External: d, Cluster: d}
	}
	st.Services = model.NewPortMap(services)
	return udpWorldT{state: st}
}

// flow returns flow i of the table.
func (udpWorldT) flow(i int) kconntrack.Flow {
	s := i % udpServices
	src := netip.AddrPortFrom(addrAt(clientBase, 1+i/50000), uint16(10000+i%50000))
	k := i % udpEndpoints
	if i%2 == 1 {
		k += udpEndpoints // stale
	}
	return kconntrack.Flow{Proto: kconntrack.ProtoUDP,
		Orig:  kconntrack.Tuple{Src: src, Dst: netip.AddrPortFrom(addrAt(svcBase, s+1), 53)},
		Reply: kconntrack.Tuple{Src: endpoint(s, k), Dst: src}}
}

// tcpState is the nftables sync workload: n TCP services with a node port
// and 10 endpoints each, as in test/bench/nftables.
func tcpState(n int) *desired.State {
	st := &desired.State{
		Family:    proxy.IPv4,
		NodeIPs:   []netip.Addr{netip.MustParseAddr("198.18.0.10")},
		NodePorts: desired.NodePortAddrs{All: true},
		Masquerade: desired.Masquerade{Mark: 1 << 14,
			Local: desired.LocalDetector{Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}},
	}
	services := make(map[proxy.ServicePortName]*desired.ServicePort, n)
	for i := 0; i < n; i++ {
		eps := make([]desired.Endpoint, 10)
		for j := range eps {
			eps[j] = desired.Endpoint{IP: addrAt(netip.MustParseAddr("198.18.0.0"), (i*10+j)%(1<<17)), Port: uint16(8080 + (i*10+j)/(1<<17))}
		}
		slices.SortFunc(eps, func(a, b desired.Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) })
		d := desired.Dispatch{Endpoints: eps}
		name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)}, Port: "http", Protocol: proxy.TCP}
		services[name] = &desired.ServicePort{Name: name, Protocol: proxy.TCP, Port: 80,
			ClusterIP: addrAt(netip.MustParseAddr("172.31.0.0"), i+1), NodePort: uint16(10000 + i),
			Internal: d, External: d, Cluster: d}
	}
	st.Services = model.NewPortMap(services)
	return st
}
