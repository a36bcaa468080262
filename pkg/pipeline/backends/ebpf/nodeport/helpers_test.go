package nodeport

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// port is a service port with a node port whose external traffic goes to
// eps (empty: refused as empty says).
func port(name string, proto proxy.Protocol, nodePort uint16, eps ...proxy.Endpoint) *desired.ServicePort {
	d := desired.Dispatch{Endpoints: eps}
	return &desired.ServicePort{
		Name:     proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: name}, Protocol: proto},
		Protocol: proto, Port: 80, NodePort: nodePort, ClusterIP: netip.MustParseAddr("172.30.0.1"),
		Internal: d, External: d, Cluster: d,
	}
}

// stateOf is an IPv4 State of node nodeIP whose node ports answer on
// every node address.
func stateOf(nodeIP netip.Addr, sps ...*desired.ServicePort) *desired.State {
	m := map[proxy.ServicePortName]*desired.ServicePort{}
	for _, sp := range sps {
		m[sp.Name] = sp
	}
	return &desired.State{Family: proxy.IPv4, NodeIPs: []netip.Addr{nodeIP},
		NodePorts: desired.NodePortAddrs{All: true}, Services: model.NewPortMap(m)}
}

func ep(ip netip.Addr, p uint16) proxy.Endpoint { return proxy.Endpoint{IP: ip, Port: p} }
