// Package nodeport is the eBPF backend's north-south path (experimental):
// tc programs on the node's interfaces translate IPv4 TCP and UDP traffic
// arriving from outside the node for node ports, external IPs and LB IPs,
// through a conntrack/NAT table of their own, from maps rendered from
// desired's State; with acceleration, an XDP program in front of them
// sends on the packets of the flows they forward. See README.md.
package nodeport

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
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
	// Acceleration says where np_xdp runs in front of the tc programs
	// ("" is disabled).
	Acceleration Acceleration
}

// The smallest capacities; entries are allocated when written (all but
// the conntrack table, an LRU), so unused capacity costs nothing.
const (
	minEntries   = 1 << 14
	minCTEntries = 1 << 18
	// maxCTEntries bounds the conntrack table: an LRU is allocated whole
	// when loaded, and per endpoint the table would take gigabytes of
	// kernel memory at tens of thousands of Services (a million flows,
	// about 200 MiB, here).
	maxCTEntries = 1 << 21
	// ctPerEndpoint is how many table entries (two a flow) the conntrack
	// table holds per endpoint the State serves, above minCTEntries.
	ctPerEndpoint = 256
	// ctPerClient is how many conntrack entries there are per ClientIP
	// affinity entry (an LRU too): a client of an affinity Service has
	// at least one flow, two entries, and most have more.
	ctPerClient = 4
)

// Proxier programs the IPv4 tc node-port path.
type Proxier struct {
	o      Options
	kernel *loaded
	// store is what the render claims and the maps hold (store.go).
	store  *store
	writes uint64
	// programmed is set once a Sync succeeded, for CanaryMissing.
	programmed bool
	flows      *Flows
}

// New returns a Proxier; nothing touches the kernel before the first Sync.
func New(o Options) (*Proxier, error) {
	if o.PinDir == "" {
		return nil, errors.New("tc node ports: no pin directory")
	}
	return &Proxier{o: o, store: newStore(), flows: &Flows{dir: o.PinDir}}, nil
}

// Sync makes the maps hold what st renders to, writing only the
// difference. It renders the whole State every time, so every sync is a
// full one; the engine's plan (reconcile.Syncs) reads the maps back at a
// RecoverySync (and the first) and after a failure, so that a restart
// with an unchanged State writes nothing.
func (p *Proxier) Sync(_ context.Context, st *desired.State, mode proxy.SyncMode) error {
	want := Render(st)
	if mode == proxy.PartialSync {
		mode = proxy.FullSync
	}
	plan, err := p.store.syncs.Begin(mode, "tc node ports")
	if err != nil {
		return err
	}
	if p.kernel != nil && mode == proxy.RecoverySync && p.pinsMissing() {
		// Load and pin again; the old links stay attached until the new
		// ones are, so translation does not stop.
		old := p.kernel
		p.kernel = nil
		// The old XDP links go first (tc serves meanwhile): an
		// interface takes one XDP link.
		old.closeXDP()
		defer old.close()
	}
	if p.kernel == nil {
		l, err := load(p.o.PinDir, p.o.Interfaces, p.o.Acceleration, sizesFor(&want))
		if err != nil {
			return err
		}
		p.kernel = l
	}
	if err := p.fits(&want); err != nil {
		return err
	}
	if plan.ReadBack {
		if err := p.store.readBack(p.kernel.coll.Maps); err != nil {
			return err
		}
	}
	p.store.claim(&want)
	n, err := p.store.write(tablesOf(p.kernel.coll.Maps, &want))
	p.writes += uint64(n)
	if err != nil {
		return err
	}
	p.programmed = true
	return nil
}

// CanaryMissing reports, once a sync succeeded, whether a pin of the maps
// or links is gone (removed, or the bpffs unmounted): the next svcproxy
// would not find what runs. A RecoverySync then loads and pins again.
func (p *Proxier) CanaryMissing() bool { return p.programmed && p.pinsMissing() }

func (p *Proxier) pinsMissing() bool {
	pins := []string{}
	for _, pin := range pinNames() {
		pins = append(pins, filepath.Join(p.o.PinDir, pin))
	}
	for _, iface := range p.o.Interfaces {
		for prog := range hooks {
			pins = append(pins, linkPin(p.o.PinDir, prog, iface))
		}
	}
	for _, iface := range p.Accelerated() {
		pins = append(pins, linkPin(p.o.PinDir, progXDP, iface))
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
	ct := min(capacity(eps*ctPerEndpoint/2, minCTEntries), maxCTEntries)
	return sizes{
		services: capacity(len(c.Services), minEntries),
		backends: capacity(len(c.Backends), minEntries),
		maglev:   capacity(len(c.Maglev), minEntries),
		ranges:   capacity(len(c.Ranges), minEntries),
		members:  capacity(len(c.Members), minEntries),
		ct:       ct,
		affinity: ct / ctPerClient,
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
		mapMaglev: len(want.Maglev), mapRanges: len(want.Ranges), mapMembers: len(want.Members)} {
		if m := p.kernel.coll.Maps[name]; uint32(n) > m.MaxEntries() {
			return fmt.Errorf("tc node ports: %d entries for map %s of capacity %d (restart svcproxy to resize)",
				n, name, m.MaxEntries())
		}
	}
	return nil
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
	// Whatever loads the maps next reads them back.
	p.store = newStore()
}

// Cleanup detaches the programs and removes every pin.
func (p *Proxier) Cleanup() error {
	p.Close()
	return Remove(p.o.PinDir)
}
