package nodeport

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
)

// A family's State can outgrow its maps: the other family's first sync
// loaded them before this family's State was known (sized from the
// expected size, or the least when none was), or an earlier svcproxy
// pinned them for a smaller State. A restart would adopt the same pins, so
// the maps grow in place instead: the programs are loaded again with that
// family's State-sized maps larger, sharing every other map (both
// conntrack tables, the other family's maps), so that no flow and no
// frontend is lost; the new maps are filled, each link is moved to the new
// programs atomically, and the new maps are pinned in the old ones' place.

// progLink is a tc link and the program it runs.
type progLink struct {
	name string
	lk   link.Link
}

// growable are the maps of a family that its State sizes and fits checks;
// the LRUs (conntrack, affinity) lose their least recent entries instead
// of failing, and keep their size. np_peers has a fixed size
// (NP_MAX_PEERS).
func (n familyMaps) growable() []string {
	return []string{n.services, n.backends, n.maglev, n.ranges, n.members, n.tunnels}
}

// grow loads the programs again with the growable maps of names sized as
// sz, sharing every other map of l. The caller fills the new maps, then
// calls swap.
func (l *loaded) grow(names familyMaps, sz sizes) (*loaded, error) {
	spec, err := programSpec(nil)
	if err != nil {
		return nil, err
	}
	grown := map[string]uint32{names.services: sz.services, names.backends: sz.backends,
		names.maglev: sz.maglev, names.ranges: sz.ranges, names.members: sz.members, names.tunnels: sz.tunnels}
	opts := ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
	for name, ms := range spec.Maps {
		if n, ok := grown[name]; ok {
			ms.MaxEntries = n
			continue
		}
		if m := l.coll.Maps[name]; m != nil {
			ms.MaxEntries = m.MaxEntries()
			opts.MapReplacements[name] = m
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		return nil, fmt.Errorf("loading the tc node-port programs with larger maps: %w", err)
	}
	return &loaded{coll: coll}, nil
}

// swap moves l's links (tc and XDP), np_progs6 and np_progs_tun, to next's
// programs, one atomic update per link or slot: a packet meets either the
// old maps or the new ones, both complete. Then next's grown maps replace
// l's pins in dir, and l is closed.
func (l *loaded) swap(next *loaded, dir string, grown []string) error {
	// The tail-called programs first: the old np_ingress hands IPv6 and
	// decapsulated packets to the new ones, whose maps are complete,
	// until its link moves.
	if err := next.fillProgArrays(); err != nil {
		return err
	}
	for _, pl := range l.links {
		if err := pl.lk.Update(next.coll.Programs[pl.name]); err != nil {
			return fmt.Errorf("moving link %s to the grown maps: %w", pl.name, err)
		}
	}
	for _, lk := range l.xdp {
		if err := lk.Update(next.coll.Programs[progXDP]); err != nil {
			return fmt.Errorf("moving link %s to the grown maps: %w", progXDP, err)
		}
	}
	next.links, next.xdp, next.xdpIfaces = l.links, l.xdp, l.xdpIfaces
	l.links, l.xdp, l.xdpIfaces = nil, nil, nil
	for _, name := range grown {
		if err := bpfmap.ReplacePin(next.coll.Maps[name], dir, pinName(name)); err != nil {
			return err
		}
	}
	l.close()
	return nil
}

// growFamily moves the programs to maps of A's family sized for want,
// filled with the store's claims before any program uses them.
func growFamily[A addrBytes](p *Proxier, f *family[A], want *contentsOf[A]) error {
	names := namesOf[A]()
	next, err := p.kernel.grow(names, sizesFor(want, p.minEntries))
	if err != nil {
		f.store.syncs.Failed()
		return err
	}
	f.store.emptied()
	n, err := f.store.write(tablesOf(next.coll.Maps, want))
	p.writes += uint64(n)
	if err == nil {
		err = p.kernel.swap(next, p.o.PinDir, names.growable())
	}
	if err != nil {
		next.close()
		f.store.syncs.Failed()
		return err
	}
	p.kernel = next
	klog.InfoS("Grew the tc programs' maps for the State", "ipFamily", familyOf[A](),
		"frontends", next.coll.Maps[names.services].MaxEntries(), "slots", next.coll.Maps[names.backends].MaxEntries())
	return nil
}
