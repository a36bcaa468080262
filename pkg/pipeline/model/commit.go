package model

import (
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Commit publishes every pending change as a new Snapshot and returns it with
// what changed since the previous Commit. Its cost is proportional to the
// Services with pending changes: the new Snapshot shares everything else
// with the previous one, which stays valid and unchanged.
func (t *Tracker) Commit() (*Snapshot, Changes) {
	t.mu.Lock()
	defer t.mu.Unlock()

	c := &commit{
		changes: Changes{
			Changed: map[proxy.ServicePortName]struct{}{},
		},
		services:  NewPortMapEditor(t.snapshot.Services),
		endpoints: NewPortMapEditor(t.snapshot.Endpoints),
	}
	for svc, ports := range t.pendingPorts {
		r := t.record(svc)
		c.applyPorts(r.ports, ports)
		r.ports = nilIfEmpty(ports)
		t.dropIfEmpty(svc, r)
	}
	for svc, eps := range t.pendingEps {
		r := t.record(svc)
		c.applyEndpoints(svc, r.eps, eps)
		r.eps = nilIfEmpty(eps)
		t.dropIfEmpty(svc, r)
	}
	for _, times := range t.triggerTimes {
		c.changes.TriggerTimes = append(c.changes.TriggerTimes, times...)
	}
	slices.SortFunc(c.changes.TriggerTimes, time.Time.Compare)

	t.pendingPorts = emptied(t.pendingPorts)
	t.pendingEps = emptied(t.pendingEps)
	t.triggerTimes = emptied(t.triggerTimes)
	t.snapshot = &Snapshot{
		Family:    t.family,
		Services:  c.services.Done(),
		Endpoints: c.endpoints.Done(),
	}
	return t.snapshot, c.changes
}

// emptied returns m emptied. A Go map keeps the room it grew to when
// cleared: after the initial lists, 10k pending Services would keep ~3 MB
// of empty maps for good, so a map that held many is replaced.
func emptied[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > 256 {
		return map[K]V{}
	}
	clear(m)
	return m
}

// nilIfEmpty returns s, or nil when it is empty: a removal is pending as an
// empty set, which should not keep its backing array.
func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

// commit is the work of one Commit call.
type commit struct {
	changes   Changes
	services  *PortMapEditor[*ServicePort]
	endpoints *PortMapEditor[EndpointList]
}

func (c *commit) markChanged(name proxy.ServicePortName) {
	c.changes.Changed[name] = struct{}{}
}

// applyPorts replaces one Service's committed ports by current ones. A UDP or
// SCTP port that is removed or changed may leave flows to its old frontends.
func (c *commit) applyPorts(committed, current portSet) {
	for _, old := range committed {
		if name := old.Name; current.get(name) == nil {
			c.services.Remove(name)
			c.markChanged(name)
			c.changes.ConntrackCleanup = c.changes.ConntrackCleanup || connectionless(name.Protocol)
		}
	}
	for _, sp := range current {
		name := sp.Name
		old := committed.get(name)
		existed := old != nil
		if old == sp {
			continue
		}
		c.services.Set(name, sp)
		c.markChanged(name)
		c.changes.ConntrackCleanup = c.changes.ConntrackCleanup || (existed && connectionless(name.Protocol))
	}
}

// applyEndpoints replaces the committed endpoint lists of svc by current
// ones.
func (c *commit) applyEndpoints(svc proxy.ServiceName, committed, current endpointSet) {
	for _, pe := range committed {
		if _, ok := current.get(pe.key); !ok {
			name := pe.key.in(svc)
			c.endpoints.Remove(name)
			c.markChanged(name)
			c.noteStaleFlows(name, pe.eps, EndpointList{})
		}
	}
	for _, pe := range current {
		old, _ := committed.get(pe.key)
		if old.Equal(pe.eps) {
			continue
		}
		name := pe.key.in(svc)
		c.endpoints.Set(name, pe.eps)
		c.markChanged(name)
		c.noteStaleFlows(name, old, pe.eps)
	}
}

// noteStaleFlows sets ConntrackCleanup when a UDP or SCTP service port lost a
// serving endpoint (its flows would keep going to it), or gained its first
// serving one (flows created while it was rejecting would keep failing).
func (c *commit) noteStaleFlows(name proxy.ServicePortName, old, current EndpointList) {
	if c.changes.ConntrackCleanup || !connectionless(name.Protocol) {
		return
	}
	stillServing := make(map[proxy.Endpoint]bool, current.Len())
	for i, info := range current.Infos() {
		if info.Serving {
			stillServing[current.Addrs()[i]] = true
		}
	}
	hadServing := false
	for i, info := range old.Infos() {
		if !info.Serving {
			continue
		}
		hadServing = true
		if !stillServing[old.Addrs()[i]] {
			c.changes.ConntrackCleanup = true
			return
		}
	}
	if !hadServing && len(stillServing) > 0 {
		c.changes.ConntrackCleanup = true
	}
}

func connectionless(p proxy.Protocol) bool {
	return p == proxy.UDP || p == proxy.SCTP
}
