package ebpf

import (
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// record is the Proxier's account of what its maps hold, kept so that a
// partial sync renders only the changed service ports: the contents, the
// frontends of every port, the group IDs in use, and how many ports share
// each cluster IP's any-port record.
type record struct {
	contents Contents
	index    frontendIndex
	taken    map[uint64]bool
	anyRefs  map[svcKey]int
}

func newRecord(c Contents, idx frontendIndex) *record {
	rec := &record{contents: c, index: idx, taken: make(map[uint64]bool, len(c.Services)), anyRefs: map[svcKey]int{}}
	for _, v := range c.Services {
		for _, tg := range v.ids() {
			rec.taken[tg.ID] = true
		}
	}
	for _, keys := range idx {
		rec.anyRefs[anyPortOf(keys)]++
	}
	return rec
}

// anyPortOf is the any-port record of the cluster IP of a port's frontends
// (port lists it last).
func anyPortOf(keys []svcKey) svcKey { return svcKey{Addr: keys[len(keys)-1].Addr} }

// change is what a partial sync replaces: the maps' entries of the changed
// ports (have) and what they render to now (want).
type change struct {
	have, want Contents
	index      frontendIndex
	anyDelta   map[svcKey]int
}

// partial renders the service ports of st.Changed. Their old IDs are
// released first, so that a port re-rendered gets its own back.
func (rec *record) partial(st *desired.State) change {
	ch := change{have: newContents(), want: newContents(), index: frontendIndex{}, anyDelta: map[svcKey]int{}}
	for name := range st.Changed {
		keys := rec.index[name]
		if len(keys) == 0 {
			continue
		}
		for _, k := range keys {
			v := rec.contents.Services[k]
			ch.have.Services[k] = v
			for _, tg := range v.ids() {
				for s := range tg.Count {
					bk := beKey{ID: tg.ID, Slot: s}
					ch.have.Backends[bk] = rec.contents.Backends[bk]
				}
				delete(rec.taken, tg.ID)
			}
		}
		ch.anyDelta[anyPortOf(keys)]--
	}
	r := renderer{st: st, taken: rec.taken, nodePortIPs: st.NodePortAddresses()}
	for name := range st.Changed {
		ch.index[name] = nil
		if sp := st.Service(name); sp != nil {
			if keys := r.port(&ch.want, sp); len(keys) > 0 {
				ch.index[name] = keys
				ch.anyDelta[anyPortOf(keys)]++
			}
		}
	}
	// An any-port record comes with the first port of its cluster IP and
	// goes with the last.
	for k, d := range ch.anyDelta {
		before := rec.anyRefs[k]
		switch {
		case before > 0 && before+d == 0:
			ch.have.Services[k] = svcVal{}
		case before == 0 && d > 0:
			ch.want.Services[k] = svcVal{}
		}
	}
	return ch
}

// size is how many service and backend entries the maps hold once ch is
// applied.
func (rec *record) size(ch change) (services, backends int) {
	return len(rec.contents.Services) - len(ch.have.Services) + len(ch.want.Services),
		len(rec.contents.Backends) - len(ch.have.Backends) + len(ch.want.Backends)
}

// commit records ch as applied.
func (rec *record) commit(ch change) {
	for k := range ch.have.Services {
		delete(rec.contents.Services, k)
	}
	for k := range ch.have.Backends {
		delete(rec.contents.Backends, k)
	}
	for k, v := range ch.want.Services {
		rec.contents.Services[k] = v
	}
	for k, v := range ch.want.Backends {
		rec.contents.Backends[k] = v
	}
	for name, keys := range ch.index {
		if keys == nil {
			delete(rec.index, name)
			continue
		}
		rec.index[name] = keys
	}
	for k, d := range ch.anyDelta {
		if rec.anyRefs[k] += d; rec.anyRefs[k] <= 0 {
			delete(rec.anyRefs, k)
		}
	}
}

// partialOK reports whether a sync of mode can render only st.Changed:
// the record must be trusted and the State must say what changed.
func (rec *record) partialOK(st *desired.State, mode proxy.SyncMode) bool {
	return rec != nil && mode == proxy.PartialSync && st.Changed != nil
}
