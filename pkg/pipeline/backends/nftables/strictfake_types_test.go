package nftables

import (
	"fmt"
	"regexp"
	"strings"
)

// The strict fake also refuses, as the kernel and nft do, what uses a set
// or map as what it is not (which knftables.Fake accepts): an "add" of a
// set or map over one of that name and another kind or type ("File
// exists"), a rule that reads a set as a map ("Expression is not a map"),
// and an element of another shape than its set's (a value in a set, none
// in a map, another number of key fields).

var (
	setTypeDecl = regexp.MustCompile(`^add (set|map) \S+ \S+ (\S+) \{ (?:type|typeof) ([^;]+) ;`)
	setDeleted  = regexp.MustCompile(`^delete (?:set|map) \S+ \S+ (\S+)$`)
	mapRead     = regexp.MustCompile(`\bv?map @(\S+)`)
	elementAdd  = regexp.MustCompile(`^add element \S+ \S+ (\S+) \{ (.*) \}$`)
)

// setShape is a set's kind and declaration, as the strict fake checks them.
type setShape struct {
	isMap bool
	decl  string // "ipv4_addr . inet_service : verdict"
}

// keyFields is the number of fields of the shape's key.
func (s setShape) keyFields() int {
	key, _, _ := strings.Cut(s.decl, " : ")
	return len(strings.Split(key, " . "))
}

// shapes returns the kind and declaration of every set and map the fake
// holds.
func (f *strictFake) shapes() map[string]setShape {
	out := map[string]setShape{}
	if f.Table == nil {
		return out
	}
	for name, st := range f.Table.Sets {
		out[name] = setShape{decl: st.Set.Type + st.Set.TypeOf}
	}
	for name, m := range f.Table.Maps {
		out[name] = setShape{isMap: true, decl: m.Map.Type + m.Map.TypeOf}
	}
	return out
}

// checkShapes fails when text uses a set or map as what it is not at that
// point of the transaction.
func (f *strictFake) checkShapes(text string) error {
	f.RLock()
	have := f.shapes()
	f.RUnlock()
	for _, line := range strings.Split(text, "\n") {
		if m := setDeleted.FindStringSubmatch(line); m != nil {
			delete(have, m[1])
			continue
		}
		if m := setTypeDecl.FindStringSubmatch(line); m != nil {
			want := setShape{isMap: m[1] == "map", decl: strings.TrimSpace(m[3])}
			if old, ok := have[m[2]]; ok && old != want {
				return fmt.Errorf("strict fake: %q: %s exists as %+v (File exists)", line, m[2], old)
			}
			have[m[2]] = want
			continue
		}
		if strings.HasPrefix(line, "add rule ") || strings.HasPrefix(line, "insert rule ") {
			for _, m := range mapRead.FindAllStringSubmatch(line, -1) {
				if s, ok := have[m[1]]; ok && !s.isMap {
					return fmt.Errorf("strict fake: %q: %s is a set (Expression is not a map)", line, m[1])
				}
			}
			continue
		}
		if err := checkElementShape(line, have); err != nil {
			return err
		}
	}
	return nil
}

// checkElementShape fails when line adds an element of another shape than
// its set's.
func checkElementShape(line string, have map[string]setShape) error {
	m := elementAdd.FindStringSubmatch(line)
	if m == nil {
		return nil
	}
	s, ok := have[m[1]]
	if !ok {
		return nil
	}
	key, _, hasValue := strings.Cut(m[2], " : ")
	switch {
	case hasValue && !s.isMap:
		return fmt.Errorf("strict fake: %q: %s is a set (set is not a map)", line, m[1])
	case !hasValue && s.isMap:
		return fmt.Errorf("strict fake: %q: %s is a map (element without a value)", line, m[1])
	case len(strings.Split(key, " . ")) != s.keyFields():
		return fmt.Errorf("strict fake: %q: %s's key has %d fields (value out of range)", line, m[1], s.keyFields())
	}
	return nil
}
