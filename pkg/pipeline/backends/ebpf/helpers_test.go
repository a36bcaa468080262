package ebpf

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// svc is a ClusterIP service port whose every dispatch is eps.
func svc(name string, proto proxy.Protocol, vip netip.Addr, port uint16, eps ...proxy.Endpoint) *desired.ServicePort {
	d := desired.Dispatch{Endpoints: eps}
	return &desired.ServicePort{
		Name:     proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: name}, Protocol: proto},
		Protocol: proto, Port: port, ClusterIP: vip,
		Internal: d, External: d, Cluster: d,
	}
}

func stateOf(family proxy.IPFamily, sps ...*desired.ServicePort) *desired.State {
	m := map[proxy.ServicePortName]*desired.ServicePort{}
	for _, sp := range sps {
		m[sp.Name] = sp
	}
	return &desired.State{Family: family, Services: model.NewPortMap(m)}
}

func eps(ip netip.Addr, ports ...uint16) []proxy.Endpoint {
	var out []proxy.Endpoint
	for _, p := range ports {
		out = append(out, proxy.Endpoint{IP: ip, Port: p})
	}
	return out
}

// changed marks every service port of st changed, for a PartialSync.
func changed(st *desired.State) *desired.State {
	st.Changed = map[proxy.ServicePortName]struct{}{}
	for name := range st.Services.Keys() {
		st.Changed[name] = struct{}{}
	}
	return st
}
