package model

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// EndpointList is one service port's endpoints, sorted by address and port
// without duplicates. It holds them as two parallel lists: the addresses and
// ports, in the form a dispatch of the desired State uses, so that a
// dispatch over all of a port's endpoints (the common case) shares the list
// instead of copying it; and a pointer per endpoint to what else is known of
// it, which the endpoints of one node in the same condition share. This
// holds in about a third of the memory what a list of pointers to full
// endpoints held, and spares the dispatch copies.
//
// An EndpointList is immutable, and so are the lists Addrs and Infos return.
// Successive snapshots, and the lists of one EndpointSlice's ports, share
// them. The zero value is empty.
type EndpointList struct {
	addrs []proxy.Endpoint
	infos []*EndpointInfo
}

// EndpointInfo is what the model knows of an endpoint besides its address
// and port: its conditions, and where it runs. The tracker interns them
// (intern.go): the endpoints of one node in the same condition, with the
// same hints, point at one. Immutable, hint lists included.
type EndpointInfo struct {
	// NodeName is the endpoint's node; "" when unknown.
	NodeName string
	// Zone is the endpoint's zone; "" when unknown.
	Zone string
	// ZoneHints and NodeHints are the topology hints; nil when absent.
	ZoneHints []string
	NodeHints []string

	Ready       bool
	Serving     bool
	Terminating bool
}

// Equal reports whether two infos hold the same conditions, node, zone and
// hints.
func (i *EndpointInfo) Equal(o *EndpointInfo) bool {
	if i == o {
		return true
	}
	if i == nil || o == nil {
		return false
	}
	return i.Ready == o.Ready && i.Serving == o.Serving && i.Terminating == o.Terminating &&
		i.NodeName == o.NodeName && i.Zone == o.Zone &&
		slices.Equal(i.ZoneHints, o.ZoneHints) && slices.Equal(i.NodeHints, o.NodeHints)
}

// NewEndpointList returns eps as a list: sorted by address and port, one
// endpoint per address and port (the first ready one, else the first), as
// the tracker builds its lists. For tests and hand-built snapshots: it
// shares no infos between endpoints.
func NewEndpointList(eps ...Endpoint) EndpointList {
	entries := make([]entry, len(eps))
	for i, e := range eps {
		entries[i] = entry{
			addr: proxy.Endpoint{IP: e.IP, Port: e.Port},
			info: &EndpointInfo{
				NodeName: e.NodeName, Zone: e.Zone, ZoneHints: slices.Clone(e.ZoneHints), NodeHints: slices.Clone(e.NodeHints),
				Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating,
			},
		}
	}
	return listOf(dedupe(entries))
}

// Len returns the number of endpoints.
func (l EndpointList) Len() int { return len(l.addrs) }

// Addrs returns the endpoints' addresses and ports, sorted, without
// duplicates. The caller must not modify the list.
func (l EndpointList) Addrs() []proxy.Endpoint { return l.addrs }

// Infos returns what is known of each endpoint, in the order of Addrs. The
// caller must modify neither the list nor the infos.
func (l EndpointList) Infos() []*EndpointInfo { return l.infos }

// At returns endpoint i in full.
func (l EndpointList) At(i int) Endpoint {
	a, info := l.addrs[i], l.infos[i]
	return Endpoint{
		IP: a.IP, Port: a.Port,
		NodeName: info.NodeName, Zone: info.Zone, ZoneHints: info.ZoneHints, NodeHints: info.NodeHints,
		Ready: info.Ready, Serving: info.Serving, Terminating: info.Terminating,
	}
}

// Equal reports whether two lists hold equal endpoints.
func (l EndpointList) Equal(o EndpointList) bool {
	return slices.Equal(l.addrs, o.addrs) && slices.EqualFunc(l.infos, o.infos, (*EndpointInfo).Equal)
}

// entry is one endpoint while a list is being built.
type entry struct {
	addr proxy.Endpoint
	info *EndpointInfo
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
	l := EndpointList{addrs: make([]proxy.Endpoint, len(entries)), infos: make([]*EndpointInfo, len(entries))}
	for i, e := range entries {
		l.addrs[i], l.infos[i] = e.addr, e.info
	}
	return l
}

// onPort returns the endpoints of entries (sorted and without duplicates,
// their port unset) on port, sharing infos, the entries' infos, which the
// lists of all of a slice's ports share.
func onPort(entries []entry, infos []*EndpointInfo, port uint16) EndpointList {
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
func infosOf(entries []entry) []*EndpointInfo {
	if len(entries) == 0 {
		return nil
	}
	infos := make([]*EndpointInfo, len(entries))
	for i, e := range entries {
		infos[i] = e.info
	}
	return infos
}
