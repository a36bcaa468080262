package klink

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// Fake is an in-memory Interface for tests: links by name, each with its
// addresses.
type Fake struct {
	mu     sync.Mutex
	links  map[string][]netip.Addr
	writes int
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake with the given links and addresses (the host's
// other interfaces, say "eth0": {node IP}).
func NewFake(links map[string][]netip.Addr) *Fake {
	f := &Fake{links: map[string][]netip.Addr{}}
	for name, addrs := range links {
		f.links[name] = slices.Clone(addrs)
	}
	return f
}

// Writes returns how many changes the Fake has accepted.
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// HasLink reports whether link name exists.
func (f *Fake) HasLink(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.links[name]
	return ok
}

// EnsureDummy is part of Interface.
func (f *Fake) EnsureDummy(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.links[name]; !ok {
		f.links[name] = nil
		f.writes++
	}
	return nil
}

// DeleteLink is part of Interface.
func (f *Fake) DeleteLink(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.links[name]; ok {
		delete(f.links, name)
		f.writes++
	}
	return nil
}

// ListAddrs is part of Interface.
func (f *Fake) ListAddrs(name string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	addrs, ok := f.links[name]
	if !ok {
		return nil, fmt.Errorf("link %s: %w", name, ErrNotFound)
	}
	return slices.Clone(addrs), nil
}

// AddAddr is part of Interface.
func (f *Fake) AddAddr(name string, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	addrs, ok := f.links[name]
	if !ok {
		return fmt.Errorf("link %s: %w", name, ErrNotFound)
	}
	if !slices.Contains(addrs, addr) {
		f.links[name] = append(addrs, addr)
		f.writes++
	}
	return nil
}

// DelAddr is part of Interface.
func (f *Fake) DelAddr(name string, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	addrs := f.links[name]
	if i := slices.Index(addrs, addr); i >= 0 {
		f.links[name] = slices.Delete(addrs, i, i+1)
		f.writes++
	}
	return nil
}

// HostAddrs is part of Interface.
func (f *Fake) HostAddrs(exclude string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netip.Addr
	for name, addrs := range f.links {
		if name != exclude {
			out = append(out, addrs...)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}
