package desired

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The unit tests build snapshots by hand; proxytest's flow table covers the
// path through the Tracker.

var testNode = Node{
	Name:      "node-a",
	IPs:       addrs("192.168.0.2", "fd00:1::2"),
	Zone:      "zone-a",
	PodCIDRs:  prefixes("10.0.1.0/24", "fd00:10::1:0/112"),
	HostAddrs: addrs("192.168.0.2", "192.168.1.2", "127.0.0.1", "fd00:1::2", "fd00:2::2", "::1"),
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func portName(name string, proto proxy.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: name}, Protocol: proto}
}

// svcPort returns a TCP service port "ns/name" on port 80 with the given
// cluster IPs, edited by edit.
func svcPort(name string, clusterIPs []netip.Addr, edit func(*model.ServicePort)) *model.ServicePort {
	sp := &model.ServicePort{Name: portName(name, proxy.TCP), Port: 80, ClusterIPs: clusterIPs}
	if edit != nil {
		edit(sp)
	}
	return sp
}

// ep describes an endpoint compactly: address, node, and readiness.
func ep(ip, node string, ready, serving, terminating bool) model.Endpoint {
	return model.Endpoint{
		IP: netip.MustParseAddr(ip), Port: 8080, NodeName: node,
		Ready: ready, Serving: serving, Terminating: terminating,
	}
}

func readyEP(ip, node string) model.Endpoint { return ep(ip, node, true, true, false) }
func termEP(ip, node string) model.Endpoint  { return ep(ip, node, false, true, true) }
func deadEP(ip, node string) model.Endpoint  { return ep(ip, node, false, false, true) }
func withHints(e model.Endpoint, zones, nodes []string) model.Endpoint {
	e.ZoneHints, e.NodeHints = zones, nodes
	return e
}

type snapEntry struct {
	sp  *model.ServicePort
	eps []model.Endpoint
}

func snapshot(family proxy.IPFamily, entries ...snapEntry) *model.Snapshot {
	svcs := map[proxy.ServicePortName]*model.ServicePort{}
	eps := map[proxy.ServicePortName][]model.Endpoint{}
	for _, e := range entries {
		svcs[e.sp.Name] = e.sp
		if e.eps != nil {
			eps[e.sp.Name] = e.eps
		}
	}
	return &model.Snapshot{Family: family, Services: model.NewPortMap(svcs), Endpoints: endpointMap(eps)}
}

// endpointMap returns each port's endpoints as the model's list.
func endpointMap(m map[proxy.ServicePortName][]model.Endpoint) model.PortMap[model.EndpointList] {
	lists := make(map[proxy.ServicePortName]model.EndpointList, len(m))
	for name, eps := range m {
		lists[name] = model.NewEndpointList(eps...)
	}
	return model.NewPortMap(lists)
}

func v4Options() Options {
	return Options{
		Family: proxy.IPv4, MasqueradeBit: 14,
		ClusterCIDRs: prefixes("10.0.0.0/16", "fd00:10::/64"),
	}
}

func endpointsOf(ss ...string) []Endpoint {
	var out []Endpoint
	for _, s := range ss {
		ap := netip.MustParseAddrPort(s)
		out = append(out, Endpoint{IP: ap.Addr(), Port: ap.Port()})
	}
	return out
}
