// Package nodeport is the eBPF backend's north-south path (experimental):
// tc programs on the node's interfaces translate IPv4 TCP and UDP traffic
// arriving from outside the node for node ports, external IPs and LB IPs,
// through a conntrack/NAT table of their own, from maps rendered from
// desired's State. See README.md.
package nodeport

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/ebpf/bpfmap"
)

// Options configure a Proxier.
type Options struct {
	// PinDir is a directory on a bpffs of this Proxier's own, where its
	// maps and links are pinned.
	PinDir string
	// Interfaces are the node's interfaces (in the caller's network
	// namespace) the programs attach to: where traffic from outside
	// arrives, and where endpoints on other nodes are reached.
	Interfaces []string
}

// The smallest capacities; entries are allocated when written (all but
// the conntrack table, an LRU), so unused capacity costs nothing.
const (
	minEntries       = 1 << 14
	minMaglevEntries = 1 << 20
	minCTEntries     = 1 << 18
	// ctPerEndpoint is how many table entries (two a flow) the conntrack
	// table holds per endpoint the State serves, above minCTEntries.
	ctPerEndpoint = 256
)

// Proxier programs the IPv4 tc node-port path.
type Proxier struct {
	o      Options
	kernel *loaded
	// have is what the maps hold; nil when unknown (read back).
	have   *Contents
	writes uint64
	// programmed is set once a Sync succeeded, for CanaryMissing.
	programmed bool
}

// New returns a Proxier; nothing touches the kernel before the first Sync.
func New(o Options) (*Proxier, error) {
	if o.PinDir == "" {
		return nil, errors.New("tc node ports: no pin directory")
	}
	return &Proxier{o: o}, nil
}

// Sync makes the maps hold what st renders to, writing only the
// difference; a RecoverySync (and the first) reads the maps back first,
// so that a restart with an unchanged State writes nothing.
func (p *Proxier) Sync(_ context.Context, st *desired.State, mode proxy.SyncMode) error {
	want := Render(st)
	if p.kernel != nil && mode == proxy.RecoverySync && p.pinsMissing() {
		// Load and pin again; the old links stay attached until the new
		// ones are, so translation does not stop.
		old := p.kernel
		p.kernel = nil
		defer old.close()
	}
	if p.kernel == nil {
		l, err := load(p.o.PinDir, p.o.Interfaces, sizesFor(&want))
		if err != nil {
			return err
		}
		p.kernel, p.have = l, nil
	}
	if err := p.fits(&want); err != nil {
		return err
	}
	if p.have == nil || mode == proxy.RecoverySync {
		have, err := p.readBack()
		if err != nil {
			return err
		}
		p.have = have
	}
	n, err := apply(p.kernel.coll.Maps, p.have, &want)
	p.writes += uint64(n)
	if err != nil {
		p.have = nil
		return err
	}
	p.have = &want
	p.programmed = true
	return nil
}

// CanaryMissing reports, once a sync succeeded, whether a pin of the maps
// or links is gone (removed, or the bpffs unmounted): the next svcproxy
// would not find what runs. A RecoverySync then loads and pins again.
func (p *Proxier) CanaryMissing() bool { return p.programmed && p.pinsMissing() }

func (p *Proxier) pinsMissing() bool {
	pins := []string{}
	for _, name := range mapNames {
		pins = append(pins, filepath.Join(p.o.PinDir, name))
	}
	for _, iface := range p.o.Interfaces {
		for prog := range hooks {
			pins = append(pins, linkPin(p.o.PinDir, prog, iface))
		}
	}
	for _, pin := range pins {
		if _, err := os.Stat(pin); err != nil {
			return true
		}
	}
	return false
}

func sizesFor(c *Contents) sizes {
	eps := 0
	for _, v := range c.Services {
		eps += int(v.Count)
	}
	return sizes{
		services: capacity(len(c.Services), minEntries),
		backends: capacity(len(c.Backends), minEntries),
		maglev:   capacity(len(c.Maglev), minMaglevEntries),
		ct:       capacity(eps*ctPerEndpoint/2, minCTEntries),
	}
}

// capacity is room for twice need, a power of two, at least floor.
func capacity(need, floor int) uint32 {
	if 2*need <= floor {
		return uint32(floor)
	}
	return 1 << bits.Len32(uint32(2*need-1))
}

// fits fails when the maps cannot hold want: growing them online is not
// written yet.
func (p *Proxier) fits(want *Contents) error {
	for name, n := range map[string]int{mapServices: len(want.Services), mapBackends: len(want.Backends),
		mapMaglev: len(want.Maglev)} {
		if m := p.kernel.coll.Maps[name]; uint32(n) > m.MaxEntries() {
			return fmt.Errorf("tc node ports: %d entries for map %s of capacity %d (restart svcproxy to resize)",
				n, name, m.MaxEntries())
		}
	}
	return nil
}

func (p *Proxier) readBack() (*Contents, error) {
	m := p.kernel.coll.Maps
	c := Contents{}
	var err error
	if c.Services, err = (bpfmap.Table[svcKey, svcVal]{M: m[mapServices]}).Dump(); err != nil {
		return nil, fmt.Errorf("reading back %s: %w", mapServices, err)
	}
	if c.Backends, err = (bpfmap.Table[beKey, beVal]{M: m[mapBackends]}).Dump(); err != nil {
		return nil, fmt.Errorf("reading back %s: %w", mapBackends, err)
	}
	if c.Maglev, err = (bpfmap.Table[beKey, beVal]{M: m[mapMaglev]}).Dump(); err != nil {
		return nil, fmt.Errorf("reading back %s: %w", mapMaglev, err)
	}
	if err := m[mapConfig].Lookup(uint32(0), &c.Config); err != nil {
		return nil, fmt.Errorf("reading back %s: %w", mapConfig, err)
	}
	return &c, nil
}

// Writes counts the map entries this Proxier has written or deleted.
func (p *Proxier) Writes() uint64 { return p.writes }

// Close releases the Proxier's descriptors; the pins keep the programs
// attached and the maps (and flows) in place for the next svcproxy.
func (p *Proxier) Close() {
	if p.kernel != nil {
		p.kernel.close()
		p.kernel = nil
	}
}

// Cleanup detaches the programs and removes every pin.
func (p *Proxier) Cleanup() error {
	p.Close()
	return Remove(p.o.PinDir)
}

// apply writes the difference between have and want, in the order that
// keeps every frontend usable throughout: a frontend's record is written
// only after every slot it counts, and a slot deleted only after no
// record counts it.
func apply(maps map[string]*ebpf.Map, have, want *Contents) (int, error) {
	bs := bpfmap.Table[beKey, beVal]{M: maps[mapBackends]}
	ms := bpfmap.Table[beKey, beVal]{M: maps[mapMaglev]}
	ss := bpfmap.Table[svcKey, svcVal]{M: maps[mapServices]}
	bPut, bVals, bDel := bpfmap.Diff(have.Backends, want.Backends)
	mPut, mVals, mDel := bpfmap.Diff(have.Maglev, want.Maglev)
	sPut, sVals, sDel := bpfmap.Diff(have.Services, want.Services)
	n, err := bpfmap.Apply([]bpfmap.Step{
		{What: "writing endpoint slots", N: len(bPut), Do: func() error { return bs.Put(bPut, bVals) }},
		{What: "writing Maglev slots", N: len(mPut), Do: func() error { return ms.Put(mPut, mVals) }},
		{What: "writing the configuration", N: boolInt(have.Config != want.Config),
			Do: func() error { return maps[mapConfig].Put(uint32(0), want.Config) }},
		{What: "writing frontends", N: len(sPut), Do: func() error { return ss.Put(sPut, sVals) }},
		{What: "deleting frontends", N: len(sDel), Do: func() error { return ss.Del(sDel) }},
		{What: "deleting Maglev slots", N: len(mDel), Do: func() error { return ms.Del(mDel) }},
		{What: "deleting endpoint slots", N: len(bDel), Do: func() error { return bs.Del(bDel) }},
	})
	if err != nil {
		return n, fmt.Errorf("tc node ports: %w", err)
	}
	return n, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
