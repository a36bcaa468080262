package model

import "sync"

// maxInterned bounds each table of an interner: past it, the table starts
// over. Node names, zones, namespaces and port names number in the
// thousands in the largest clusters; only a stream of ever-new names
// reaches the bound, and starting over loses sharing, never correctness.
const maxInterned = 1 << 14

// interner hands out one copy of each string it is given, so that the
// endpoints of a node share its name instead of each holding the copy its
// API object was decoded with (at 10k Services × 10 endpoints with a node
// name and zone each, those copies were 4.5 MB of a 54 MB model). It also
// shares single-name hint lists, the common form of topology hints, and
// whole EndpointInfos: the endpoints of one node in the same condition
// point at one.
type interner struct {
	mu      sync.Mutex
	strings map[string]string
	lists   map[string][]string
	infos   map[infoKey]*EndpointInfo
}

// infoKey identifies an EndpointInfo whose hint lists hold one name at most.
type infoKey struct {
	nodeName, zone     string
	zoneHint, nodeHint string
	// hasZoneHint and hasNodeHint tell a hint named "" from no hint.
	hasZoneHint, hasNodeHint    bool
	ready, serving, terminating bool
}

func newInterner() *interner {
	return &interner{strings: map[string]string{}, lists: map[string][]string{}, infos: map[infoKey]*EndpointInfo{}}
}

// str returns the shared copy of s.
func (in *interner) str(s string) string {
	if s == "" {
		return ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.strLocked(s)
}

func (in *interner) strLocked(s string) string {
	if s == "" {
		return ""
	}
	return shared(in.strings, s, func() string { return s })
}

// listLocked returns names as a list that the caller must not modify: a
// shared one when it holds a single name, else a new one; nil when it is
// empty.
func (in *interner) listLocked(names []string) []string {
	switch len(names) {
	case 0:
		return nil
	case 1:
		name := in.strLocked(names[0])
		return shared(in.lists, name, func() []string { return []string{name} })
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = in.strLocked(n)
	}
	return out
}

// info returns the shared EndpointInfo equal to want when no hint list of
// want holds more than one name, else one of its own; its strings and
// lists are shared either way. The caller must not modify want's hint lists
// afterwards.
func (in *interner) info(want EndpointInfo) *EndpointInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	key, ok := infoKeyOf(&want)
	if info, hit := in.infos[key]; ok && hit {
		return info
	}
	info := &EndpointInfo{
		NodeName: in.strLocked(want.NodeName), Zone: in.strLocked(want.Zone),
		ZoneHints: in.listLocked(want.ZoneHints), NodeHints: in.listLocked(want.NodeHints),
		Ready: want.Ready, Serving: want.Serving, Terminating: want.Terminating,
	}
	if ok {
		// Keyed by the shared strings, not by the caller's copies.
		key, _ = infoKeyOf(info)
		shared(in.infos, key, func() *EndpointInfo { return info })
	}
	return info
}

// infoKeyOf returns the key of info; false when a hint list holds more than
// one name (such infos are not shared).
func infoKeyOf(info *EndpointInfo) (infoKey, bool) {
	if len(info.ZoneHints) > 1 || len(info.NodeHints) > 1 {
		return infoKey{}, false
	}
	key := infoKey{
		nodeName: info.NodeName, zone: info.Zone,
		hasZoneHint: len(info.ZoneHints) == 1, hasNodeHint: len(info.NodeHints) == 1,
		ready: info.Ready, serving: info.Serving, terminating: info.Terminating,
	}
	if key.hasZoneHint {
		key.zoneHint = info.ZoneHints[0]
	}
	if key.hasNodeHint {
		key.nodeHint = info.NodeHints[0]
	}
	return key, true
}

// shared returns table's value for key, storing build's first.
func shared[K comparable, V any](table map[K]V, key K, build func() V) V {
	if v, ok := table[key]; ok {
		return v
	}
	if len(table) >= maxInterned {
		clear(table)
	}
	v := build()
	table[key] = v
	return v
}
