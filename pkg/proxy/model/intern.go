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
// whole locations: the endpoints of one node point at one record of its
// name, zone and hints.
type interner struct {
	mu        sync.Mutex
	strings   map[string]string
	lists     map[string][]string
	locations map[locationKey]*location
}

// locationKey identifies a location whose hint lists hold one name at most.
type locationKey struct {
	nodeName, zone     string
	zoneHint, nodeHint string
	// hasZoneHint and hasNodeHint tell a hint named "" from no hint.
	hasZoneHint, hasNodeHint bool
}

func newInterner() *interner {
	return &interner{strings: map[string]string{}, lists: map[string][]string{}, locations: map[locationKey]*location{}}
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

// list returns names as a list that the caller must not modify: a shared
// one when it holds a single name, else a new one; nil when it is empty.
func (in *interner) list(names []string) []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.listLocked(names)
}

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

// location returns the location of the given names, shared when no hint
// list holds more than one name; nil when every name is empty. The caller
// must not modify the hint lists it passes afterwards.
func (in *interner) location(nodeName, zone string, zoneHints, nodeHints []string) *location {
	if nodeName == "" && zone == "" && len(zoneHints) == 0 && len(nodeHints) == 0 {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	key, ok := locationKeyOf(nodeName, zone, zoneHints, nodeHints)
	if loc, hit := in.locations[key]; ok && hit {
		return loc
	}
	loc := &location{nodeName: in.strLocked(nodeName), zone: in.strLocked(zone),
		zoneHints: in.listLocked(zoneHints), nodeHints: in.listLocked(nodeHints)}
	if ok {
		// Keyed by the shared strings, not by the caller's copies.
		key, _ = locationKeyOf(loc.nodeName, loc.zone, loc.zoneHints, loc.nodeHints)
		shared(in.locations, key, func() *location { return loc })
	}
	return loc
}

// locationKeyOf returns the key of a location; false when a hint list holds
// more than one name (such locations are not shared).
func locationKeyOf(nodeName, zone string, zoneHints, nodeHints []string) (locationKey, bool) {
	if len(zoneHints) > 1 || len(nodeHints) > 1 {
		return locationKey{}, false
	}
	key := locationKey{nodeName: nodeName, zone: zone, hasZoneHint: len(zoneHints) == 1, hasNodeHint: len(nodeHints) == 1}
	if key.hasZoneHint {
		key.zoneHint = zoneHints[0]
	}
	if key.hasNodeHint {
		key.nodeHint = nodeHints[0]
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
