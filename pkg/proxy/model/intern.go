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
// shares single-name hint lists, the common form of topology hints.
type interner struct {
	mu      sync.Mutex
	strings map[string]string
	lists   map[string][]string
}

func newInterner() *interner {
	return &interner{strings: map[string]string{}, lists: map[string][]string{}}
}

// str returns the shared copy of s.
func (in *interner) str(s string) string {
	if s == "" {
		return ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return shared(in.strings, s, func() string { return s })
}

// list returns names as a list that the caller must not modify: a shared
// one when it holds a single name, else a new one; nil when it is empty.
func (in *interner) list(names []string) []string {
	switch len(names) {
	case 0:
		return nil
	case 1:
		name := in.str(names[0])
		in.mu.Lock()
		defer in.mu.Unlock()
		return shared(in.lists, name, func() []string { return []string{name} })
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = in.str(n)
	}
	return out
}

// shared returns table's value for key, storing build's first.
func shared[V any](table map[string]V, key string, build func() V) V {
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
