package kipset

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Fake is an in-memory Interface for tests. Like the kernel (without
// NLM_F_EXCL), adding a present member or deleting an absent one succeeds.
type Fake struct {
	mu   sync.Mutex
	sets map[string]*fakeSet
	// writes counts every successful change.
	writes int
	// InUse names sets that DestroySet must refuse, as the kernel refuses
	// to destroy a set an iptables rule references.
	InUse map[string]bool
}

type fakeSet struct {
	set     Set
	entries map[Entry]struct{}
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake without sets.
func NewFake() *Fake { return &Fake{sets: map[string]*fakeSet{}, InUse: map[string]bool{}} }

// Writes returns how many changes the Fake has accepted.
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// Has reports whether set name contains e.
func (f *Fake) Has(name string, e Entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sets[name]
	if s == nil {
		return false
	}
	_, ok := s.entries[e]
	return ok
}

// Set returns the description of set name.
func (f *Fake) Set(name string) (Set, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sets[name]
	if s == nil {
		return Set{}, false
	}
	return s.set, true
}

// CreateSet is part of Interface. A hash set holds at most MaxElements
// members (DefaultMaxElements when 0), as in the kernel.
func (f *Fake) CreateSet(set Set) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sets[set.Name] != nil {
		return fmt.Errorf("creating ipset %s: %w", set.Name, ErrExists)
	}
	if set.Type != BitmapPort && set.MaxElements == 0 {
		set.MaxElements = DefaultMaxElements
	}
	f.sets[set.Name] = &fakeSet{set: set, entries: map[Entry]struct{}{}}
	f.writes++
	return nil
}

// DestroySet is part of Interface.
func (f *Fake) DestroySet(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.sets[name] == nil:
		return fmt.Errorf("destroying ipset %s: %w", name, ErrNotFound)
	case f.InUse[name]:
		return fmt.Errorf("destroying ipset %s: %w", name, ErrInUse)
	}
	delete(f.sets, name)
	f.writes++
	return nil
}

// ListSets is part of Interface.
func (f *Fake) ListSets() ([]Set, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sets := make([]Set, 0, len(f.sets))
	for _, s := range f.sets {
		set := s.set
		set.Comment = ""
		sets = append(sets, set)
	}
	slices.SortFunc(sets, func(a, b Set) int { return strings.Compare(a.Name, b.Name) })
	return sets, nil
}

// SwapSets is part of Interface.
func (f *Fake) SwapSets(a, b string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sa, sb := f.sets[a], f.sets[b]
	switch {
	case sa == nil || sb == nil:
		return fmt.Errorf("swapping ipsets %s and %s: %w", a, b, ErrNotFound)
	case sa.set.Type != sb.set.Type || sa.set.Family != sb.set.Family:
		return fmt.Errorf("swapping ipsets %s (%s %s) and %s (%s %s): not of one type",
			a, sa.set.Type, sa.set.Family, b, sb.set.Type, sb.set.Family)
	}
	sa.set.Name, sb.set.Name = b, a
	f.sets[a], f.sets[b] = sb, sa
	f.writes++
	return nil
}

// ListEntries is part of Interface.
func (f *Fake) ListEntries(name string) ([]Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sets[name]
	if s == nil {
		return nil, fmt.Errorf("listing ipset %s: %w", name, ErrNotFound)
	}
	out := make([]Entry, 0, len(s.entries))
	for e := range s.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// AddEntry is part of Interface.
func (f *Fake) AddEntry(name string, e Entry) error {
	return f.change(name, e, true)
}

// DelEntry is part of Interface.
func (f *Fake) DelEntry(name string, e Entry) error {
	return f.change(name, e, false)
}

func (f *Fake) change(name string, e Entry, add bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sets[name]
	if s == nil {
		return fmt.Errorf("changing ipset %s: %w", name, ErrNotFound)
	}
	if err := validate(s.set.Type, e); err != nil {
		return fmt.Errorf("ipset %s: %w", name, err)
	}
	if fam := FamilyOf(e); s.set.Type != BitmapPort && fam != s.set.Family {
		return fmt.Errorf("ipset %s is %s, entry %v is %s", name, s.set.Family, e, fam)
	}
	_, present := s.entries[e]
	switch {
	case add && !present && s.set.Type != BitmapPort && len(s.entries) >= int(s.set.MaxElements):
		return fmt.Errorf("adding %v to ipset %s: %w", e, name, ErrFull)
	case add && !present:
		s.entries[e] = struct{}{}
	case !add && present:
		delete(s.entries, e)
	default:
		return nil
	}
	f.writes++
	return nil
}

// Dump lists every set and its members, sorted, one member per line.
func (f *Fake) Dump() string {
	sets, _ := f.ListSets()
	var b strings.Builder
	for _, s := range sets {
		fmt.Fprintf(&b, "%s %s %s\n", s.Name, s.Type, s.Family)
		entries, _ := f.ListEntries(s.Name)
		for _, e := range entries {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	return b.String()
}

// FamilyOf returns the family of e's address (Inet for port-only entries).
func FamilyOf(e Entry) Family {
	if e.IP.Is6() {
		return Inet6
	}
	return Inet
}
