package conntrack

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func ip(s string) netip.Addr       { return netip.MustParseAddr(s) }
func ap(s string) netip.AddrPort   { return netip.MustParseAddrPort(s) }
func ep(s string) desired.Endpoint { a := ap(s); return desired.Endpoint{IP: a.Addr(), Port: a.Port()} }

func eps(list ...string) []desired.Endpoint {
	var out []desired.Endpoint
	for _, s := range list {
		out = append(out, ep(s))
	}
	return out
}

// port builds a service port whose three dispatches serve the given
// endpoints, unless the caller edits them.
func port(name string, proto proxy.Protocol, clusterIP string, p uint16, edits ...func(*desired.ServicePort)) *desired.ServicePort {
	sp := &desired.ServicePort{
		Name:      proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: name}, Protocol: proto},
		Protocol:  proto,
		Port:      p,
		ClusterIP: ip(clusterIP),
	}
	for _, e := range edits {
		e(sp)
	}
	return sp
}

func servedBy(list ...string) func(*desired.ServicePort) {
	return func(sp *desired.ServicePort) {
		e := eps(list...)
		sp.Internal.Endpoints, sp.External.Endpoints, sp.Cluster.Endpoints = e, e, e
	}
}

func nodePort(n uint16) func(*desired.ServicePort) {
	return func(sp *desired.ServicePort) { sp.NodePort = n }
}

func state(ports ...*desired.ServicePort) *desired.State {
	st := &desired.State{
		Family:    proxy.IPv4,
		NodeIPs:   []netip.Addr{ip("198.18.0.11")},
		NodePorts: desired.NodePortAddrs{IPs: []netip.Addr{ip("198.18.0.11")}},
		Services:  model.PortMap[*desired.ServicePort]{},
	}
	for _, sp := range ports {
		st.Services = st.Services.With(sp.Name, sp)
	}
	return st
}

// next returns a State following prev with ports replaced or added, and
// Changed naming them plus the removed ones.
func next(prev *desired.State, remove []string, ports ...*desired.ServicePort) *desired.State {
	st := state()
	st.Changed = map[proxy.ServicePortName]struct{}{}
	for name, sp := range prev.Services.All() {
		st.Services = st.Services.With(name, sp)
	}
	for _, name := range remove {
		for n := range st.Services.All() {
			if n.Name == name {
				st.Services = st.Services.Without(n)
				st.Changed[n] = struct{}{}
			}
		}
	}
	for _, sp := range ports {
		st.Services = st.Services.With(sp.Name, sp)
		st.Changed[sp.Name] = struct{}{}
	}
	return st
}

const client = "198.18.0.100:40000"

// udp is a flow from the test client to dst answered by replySrc.
func udp(dst, replySrc string) kconntrack.Flow { return flowOf(kconntrack.ProtoUDP, dst, replySrc) }

func flowOf(proto uint8, dst, replySrc string) kconntrack.Flow {
	return kconntrack.Flow{Proto: proto,
		Orig:  kconntrack.Tuple{Src: ap(client), Dst: ap(dst)},
		Reply: kconntrack.Tuple{Src: ap(replySrc), Dst: ap(client)}}
}

// replied marks f as having seen a reply.
func replied(f kconntrack.Flow) kconntrack.Flow { f.Replied = true; return f }
