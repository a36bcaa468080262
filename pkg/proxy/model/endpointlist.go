package model

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// EndpointList is one service port's endpoints, sorted by address and port
// without duplicates. It holds them as two parallel lists: the addresses and
// ports, in the form a dispatch of the desired State uses, so that a
// dispatch over all of a port's endpoints (the common case) shares the list
// instead of copying it; and what else is known of each endpoint, 16 bytes
// each, its node, zone and hints shared with the other endpoints of its node.
// At 10k Services × 10 endpoints this holds in 4.8 MB what a list of
// pointers to full endpoints held in 12 MB, plus 5 MB of dispatch copies
// (docs/performance.md).
//
// An EndpointList is immutable, and so are the lists Addrs and Infos return.
// Successive snapshots, and the lists of one EndpointSlice's ports, share
// them. The zero value is empty.
type EndpointList struct {
	addrs []proxy.Endpoint
	infos []EndpointInfo
}

// EndpointInfo is what the model knows of an endpoint besides its address
// and port: its conditions, and where it runs.
type EndpointInfo struct {
	// where is nil when the endpoint has no node name, zone or hints.
	where       *location
	Ready       bool
	Serving     bool
	Terminating bool
}

// location is where an endpoint runs and the topology hints it carries.
// The tracker interns them (intern.go): the endpoints of one node with the
// same hints share one. Immutable.
type location struct {
	nodeName, zone       string
	zoneHints, nodeHints []string
}

// NodeName is the endpoint's node; "" when unknown.
func (i EndpointInfo) NodeName() string {
	if i.where == nil {
		return ""
	}
	return i.where.nodeName
}

// Zone is the endpoint's zone; "" when unknown.
func (i EndpointInfo) Zone() string {
	if i.where == nil {
		return ""
	}
	return i.where.zone
}

// ZoneHints are the zones the endpoint is hinted for; nil when absent. The
// caller must not modify the list.
func (i EndpointInfo) ZoneHints() []string {
	if i.where == nil {
		return nil
	}
	return i.where.zoneHints
}

// NodeHints are the nodes the endpoint is hinted for; nil when absent. The
// caller must not modify the list.
func (i EndpointInfo) NodeHints() []string {
	if i.where == nil {
		return nil
	}
	return i.where.nodeHints
}

// Equal reports whether two infos hold the same conditions, node, zone and
// hints.
func (i EndpointInfo) Equal(o EndpointInfo) bool {
	return i.Ready == o.Ready && i.Serving == o.Serving && i.Terminating == o.Terminating &&
		i.where.equal(o.where)
}

func (l *location) equal(o *location) bool {
	if l == o {
		return true
	}
	if l == nil || o == nil {
		return false
	}
	return l.nodeName == o.nodeName && l.zone == o.zone &&
		slices.Equal(l.zoneHints, o.zoneHints) && slices.Equal(l.nodeHints, o.nodeHints)
}

// NewEndpointList returns eps as a list: sorted by address and port, one
// endpoint per address and port (the first ready one, else the first), as
// the tracker builds its lists. For tests and hand-built snapshots: it
// shares no names between endpoints.
func NewEndpointList(eps ...Endpoint) EndpointList {
	entries := make([]entry, len(eps))
	for i, e := range eps {
		entries[i] = entry{
			addr: proxy.Endpoint{IP: e.IP, Port: e.Port},
			info: EndpointInfo{
				where: newLocation(e.NodeName, e.Zone, slices.Clone(e.ZoneHints), slices.Clone(e.NodeHints)),
				Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating,
			},
		}
	}
	return listOf(dedupe(entries))
}

// newLocation returns the location of the given names, nil when all are
// empty.
func newLocation(nodeName, zone string, zoneHints, nodeHints []string) *location {
	if nodeName == "" && zone == "" && len(zoneHints) == 0 && len(nodeHints) == 0 {
		return nil
	}
	return &location{nodeName: nodeName, zone: zone, zoneHints: zoneHints, nodeHints: nodeHints}
}

// Len returns the number of endpoints.
func (l EndpointList) Len() int { return len(l.addrs) }

// Addrs returns the endpoints' addresses and ports, sorted, without
// duplicates. The caller must not modify the list.
func (l EndpointList) Addrs() []proxy.Endpoint { return l.addrs }

// Infos returns what is known of each endpoint, in the order of Addrs. The
// caller must not modify the list.
func (l EndpointList) Infos() []EndpointInfo { return l.infos }

// At returns endpoint i in full.
func (l EndpointList) At(i int) Endpoint {
	a, info := l.addrs[i], l.infos[i]
	return Endpoint{
		IP: a.IP, Port: a.Port,
		NodeName: info.NodeName(), Zone: info.Zone(), ZoneHints: info.ZoneHints(), NodeHints: info.NodeHints(),
		Ready: info.Ready, Serving: info.Serving, Terminating: info.Terminating,
	}
}

// Equal reports whether two lists hold equal endpoints.
func (l EndpointList) Equal(o EndpointList) bool {
	return slices.Equal(l.addrs, o.addrs) && slices.EqualFunc(l.infos, o.infos, EndpointInfo.Equal)
}

// entry is one endpoint while a list is being built.
type entry struct {
	addr proxy.Endpoint
	info EndpointInfo
}

// appendEntries appends l's endpoints to entries.
func (l EndpointList) appendEntries(entries []entry) []entry {
	for i, a := range l.addrs {
		entries = append(entries, entry{addr: a, info: l.infos[i]})
	}
	return entries
}

// dedupe sorts entries (which it owns) by address and port and keeps one
// entry per address and port: the first ready one, else the first.
func dedupe(entries []entry) []entry {
	slices.SortStableFunc(entries, func(a, b entry) int { return a.addr.Compare(b.addr) })
	out := entries[:0]
	for _, e := range entries {
		last := len(out) - 1
		switch {
		case last < 0 || out[last].addr != e.addr:
			out = append(out, e)
		case !out[last].info.Ready && e.info.Ready:
			out[last] = e
		}
	}
	return out
}

// listOf returns entries, sorted and without duplicates, as a list of its
// own: each part is one allocation of the exact size.
func listOf(entries []entry) EndpointList {
	if len(entries) == 0 {
		return EndpointList{}
	}
	l := EndpointList{addrs: make([]proxy.Endpoint, len(entries)), infos: make([]EndpointInfo, len(entries))}
	for i, e := range entries {
		l.addrs[i], l.infos[i] = e.addr, e.info
	}
	return l
}

// onPort returns the endpoints of entries (sorted and without duplicates,
// their port unset) on port, sharing infos, the entries' infos, which the
// lists of all of a slice's ports share.
func onPort(entries []entry, infos []EndpointInfo, port uint16) EndpointList {
	if len(entries) == 0 {
		return EndpointList{}
	}
	addrs := make([]proxy.Endpoint, len(entries))
	for i, e := range entries {
		addrs[i] = proxy.Endpoint{IP: e.addr.IP, Port: port}
	}
	return EndpointList{addrs: addrs, infos: infos}
}

// infosOf returns the infos of entries, as one list.
func infosOf(entries []entry) []EndpointInfo {
	if len(entries) == 0 {
		return nil
	}
	infos := make([]EndpointInfo, len(entries))
	for i, e := range entries {
		infos[i] = e.info
	}
	return infos
}
