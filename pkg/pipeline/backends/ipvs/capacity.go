package ipvs

import (
	"errors"
	"fmt"
	"math/bits"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Hash sets are sized from the State. They are created with upstream's
// capacity (kipset.DefaultMaxElements), so that upstream kube-proxy, whose
// `ipset create … -exist` accepts only a set created with its own
// parameters, can take them over after a rollback; a set that upstream (or
// an earlier run) created is adopted as it is. Before the members of a
// sync are added, a set they would overflow is replaced by a larger copy
// (resize); a full sync gives a set that shrank far enough upstream's
// capacity back.

// setResizeTmp is the set a resize fills before it swaps it in; one left
// behind by an interrupted resize is removed by the next one, and by
// Cleanup.
const setResizeTmp = "KUBE-IPVS-RESIZE"

// capacityFor is the capacity a set that must hold n members is given:
// upstream's while they fit, else the next power of two, so that a set
// growing member by member is resized only when its size doubles.
func capacityFor(n int) uint32 {
	if n <= kipset.DefaultMaxElements {
		return kipset.DefaultMaxElements
	}
	return 1 << bits.Len(uint(n-1))
}

// hashSets maps this family's hash set names to their specs; bitmap:port
// sets have a fixed range instead of a capacity.
func (p *Proxier) hashSets() map[string]setSpec {
	out := map[string]setSpec{}
	for _, s := range setSpecs {
		if s.typ != kipset.BitmapPort {
			out[setName(p.family, s.name)] = s
		}
	}
	return out
}

// ensureCapacity resizes, before apply adds members (adds: how many, by
// set), each hash set they would overflow: apply adds before it deletes,
// so a set must hold what the kernel has plus what is added.
func (p *Proxier) ensureCapacity(adds map[string]int) error {
	var errs []error
	hash := p.hashSets()
	for name, n := range adds {
		spec, ok := hash[name]
		if !ok {
			continue
		}
		if need := p.store.sets[name].KernelLen() + n; uint32(need) > p.capacityOf(name) {
			errs = append(errs, p.resize(name, spec, capacityFor(need)))
		}
	}
	return errors.Join(errs...)
}

// shrinkSets gives upstream's capacity back, after a full sync, to each
// hash set that holds at most half of it (half, so that a set whose size
// hovers around the bound is not resized back and forth).
func (p *Proxier) shrinkSets() error {
	var errs []error
	for name, spec := range p.hashSets() {
		if p.capacityOf(name) > kipset.DefaultMaxElements && p.store.sets[name].KernelLen() <= kipset.DefaultMaxElements/2 {
			errs = append(errs, p.resize(name, spec, kipset.DefaultMaxElements))
		}
	}
	return errors.Join(errs...)
}

func (p *Proxier) capacityOf(name string) uint32 {
	if c, ok := p.capacity[name]; ok {
		return c
	}
	return kipset.DefaultMaxElements
}

// resize replaces set name by one of the given capacity holding the same
// members, without a moment in which the iptables rules that match on it
// see fewer: a temporary set is filled with the members the kernel holds,
// swapped with it in one step (the rules follow the name), and then
// destroyed with the old contents.
func (p *Proxier) resize(name string, spec setSpec, capacity uint32) error {
	tmp := setName(p.family, setResizeTmp)
	if err := p.c.IPSet.DestroySet(tmp); err != nil && !errors.Is(err, kipset.ErrNotFound) {
		return fmt.Errorf("resizing ipset %s: %w", name, err)
	}
	family := kipset.Inet
	if p.family == proxy.IPv6 {
		family = kipset.Inet6
	}
	if err := p.c.IPSet.CreateSet(kipset.Set{Name: tmp, Type: spec.typ, Family: family, MaxElements: capacity}); err != nil {
		return fmt.Errorf("resizing ipset %s: %w", name, err)
	}
	copied, err := p.copyMembers(name, tmp)
	if err == nil {
		err = p.c.IPSet.SwapSets(tmp, name)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("resizing ipset %s: %w", name, err), p.c.IPSet.DestroySet(tmp))
	}
	old := p.capacityOf(name)
	p.capacity[name] = capacity
	klog.InfoS("Resized an ipset to fit the Services", "ipFamily", p.family, "set", name,
		"membersCopied", copied, "from", old, "to", capacity)
	if err := p.c.IPSet.DestroySet(tmp); err != nil {
		return fmt.Errorf("removing ipset %s after resizing %s: %w", tmp, name, err)
	}
	return nil
}

// copyMembers adds the members the kernel holds in set from to set to.
func (p *Proxier) copyMembers(from, to string) (int, error) {
	entries, err := p.c.IPSet.ListEntries(from)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if err := p.c.IPSet.AddEntry(to, e); err != nil {
			return 0, err
		}
	}
	return len(entries), nil
}
