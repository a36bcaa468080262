// Package nodeport is the eBPF backend's north-south path (experimental):
// tc programs on the node's interfaces translate IPv4 and IPv6 TCP and UDP traffic
// arriving from outside the node for node ports, external IPs and LB IPs,
// through a conntrack/NAT table of their own, from maps rendered from
// desired's State; with acceleration, an XDP program in front of them
// sends on the packets of the flows they forward. See README.md.
package nodeport

import (
	"context"
	"errors"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

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

// Proxier programs the tc node-port path of both IP families: one set of
// programs and maps, each family's maps written from its own State by its
// own syncer (Sync takes either family's).
type Proxier struct {
	o Options
	// mu serializes the families' syncs, which share the programs.
	mu sync.Mutex
	// minEntries is the least capacity of the maps a State sizes
	// (minEntries but in tests that grow them).
	minEntries int
	kernel     *loaded
	v4         *family[[4]byte]
	v6         *family[[16]byte]
	writes     uint64
	// programmed is set once a Sync succeeded, for CanaryMissing.
	programmed bool
	flows      *Flows
	// expected are the sizes the families' first States are expected to
	// have (ExpectSize).
	expected map[proxy.IPFamily]proxy.ExpectedSize
	// swept is when Sync last swept np_snat (sweepReservations), and
	// sweptNoPort the families' NoMasqueradePort drops then.
	swept       time.Time
	sweptNoPort [2]uint64
	// background counts the seeding and sweeps of np_snat running beside
	// the syncs (inBackground), which Close waits for; sweepBusy is set
	// while a sweep runs.
	background sync.WaitGroup
	sweepBusy  atomic.Bool
}

// family is one IP family's part of the Proxier: what its render claims
// and the maps hold (store.go), and the sizes its last State asked for.
type family[A addrBytes] struct {
	store *store[A]
	sizes *sizes
	// routes are the UDP DSR routes the last successful sync wrote
	// (contentsOf.tunnelRoutes); nil before the first.
	routes map[tunnelRoute[A]]struct{}
}

func newFamily[A addrBytes]() *family[A] { return &family[A]{store: newStore[A]()} }

// New returns a Proxier; nothing touches the kernel before the first Sync.
func New(o Options) (*Proxier, error) {
	if o.PinDir == "" {
		return nil, errors.New("tc node ports: no pin directory")
	}
	return &Proxier{o: o, minEntries: minEntries, v4: newFamily[[4]byte](), v6: newFamily[[16]byte](), flows: &Flows{dir: o.PinDir}}, nil
}

// Sync makes the maps of st's family hold what st renders to, writing only
// the difference. It renders the whole State every time, so every sync is
// a full one (which is why desired's SameGlobals may leave out what only
// these programs render: DSR's peers and cluster sources); the engine's plan (reconcile.Syncs) reads the maps back at a
// RecoverySync (and the first) and after a failure, so that a restart
// with an unchanged State writes nothing.
func (p *Proxier) Sync(_ context.Context, st *desired.State, mode proxy.SyncMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mode == proxy.PartialSync {
		mode = proxy.FullSync
	}
	var err error
	if st.Family == proxy.IPv6 {
		err = syncFamily(p, p.v6, render[[16]byte](st), mode)
	} else {
		err = syncFamily(p, p.v4, render[[4]byte](st), mode)
	}
	if err == nil {
		p.programmed = true
		p.sweepReservations(time.Now())
	}
	return err
}

func syncFamily[A addrBytes](p *Proxier, f *family[A], want contentsOf[A], mode proxy.SyncMode) error {
	plan, err := f.store.syncs.Begin(mode, "tc node ports ("+string(familyOf[A]())+")")
	if err != nil {
		return err
	}
	sz := sizesFor(&want, p.minEntries)
	f.sizes = &sz
	if err := p.ensureLoaded(mode); err != nil {
		return err
	}
	if plan.ReadBack {
		if err := f.store.readBack(p.kernel.coll.Maps); err != nil {
			return err
		}
	}
	f.store.claim(&want)
	var n int
	if fits(p.kernel, namesOf[A](), &want) {
		n, err = f.store.write(tablesOf(p.kernel.coll.Maps, &want))
		p.writes += uint64(n)
	} else {
		err = growFamily(p, f, &want)
	}
	if err == nil {
		if gone := goneRoutes(f.routes, want.tunnelRoutes); gone != nil {
			dropTunnelFlows(p, gone)
		}
		f.routes = want.tunnelRoutes
	}
	return err
}

// ensureLoaded loads and pins the programs and maps, sized by what each
// family's last State asked for (for a family not synced yet, its
// expected size, else the least; maps pinned already keep their size),
// unless they are loaded, and again at a RecoverySync that finds a pin
// gone. A family whose maps were loaded again reads them back at its next
// sync.
func (p *Proxier) ensureLoaded(mode proxy.SyncMode) error {
	if p.kernel != nil && mode == proxy.RecoverySync && p.pinsMissing() {
		// Load and pin again; the old links stay attached until the new
		// ones are, so translation does not stop.
		old := p.kernel
		p.kernel = nil
		// The old XDP links go first (tc serves meanwhile): an
		// interface takes one XDP link.
		old.closeXDP()
		defer old.close()
		p.v4.store.syncs.Failed()
		p.v6.store.syncs.Failed()
	}
	if p.kernel != nil {
		return nil
	}
	least := sizesOf(p.minEntries, 0, 0, 0, 0, 0, 0)
	fs := familySizes{proxy.IPv4: least, proxy.IPv6: least}
	for family, e := range p.expected {
		fs[family] = expectedSizes(e, p.minEntries)
	}
	if p.v4.sizes != nil {
		fs[proxy.IPv4] = *p.v4.sizes
	}
	if p.v6.sizes != nil {
		fs[proxy.IPv6] = *p.v6.sizes
	}
	l, err := load(p.o.PinDir, p.o.Interfaces, p.o.Acceleration, fs)
	if err != nil {
		return err
	}
	p.kernel = l
	p.seedReservations()
	return nil
}

// CanaryMissing reports, once a sync succeeded, whether a pin of the maps
// or links is gone (removed, or the bpffs unmounted): the next svcproxy
// would not find what runs. A RecoverySync then loads and pins again.
func (p *Proxier) CanaryMissing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.programmed && p.pinsMissing()
}

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
	for _, iface := range p.accelerated() {
		pins = append(pins, linkPin(p.o.PinDir, progXDP, iface))
	}
	for _, pin := range pins {
		if _, err := os.Stat(pin); err != nil {
			return true
		}
	}
	return false
}

// sizesFor is the capacities for c, each at least floor (ct: minCTEntries).
func sizesFor[A addrBytes](c *contentsOf[A], floor int) sizes {
	eps := 0
	for _, v := range c.Services {
		eps += int(v.Count)
	}
	return sizesOf(floor, len(c.Services), len(c.Backends), len(c.Maglev), len(c.Ranges), len(c.Members), eps)
}

// sizesOf is the capacities, each at least floor, for a State's entries
// and the endpoints its frontends count.
func sizesOf(floor, services, backends, maglev, ranges, members, eps int) sizes {
	ct := min(capacity(eps*ctPerEndpoint/2, minCTEntries), maxCTEntries)
	return sizes{
		services: capacity(services, floor),
		backends: capacity(backends, floor),
		maglev:   capacity(maglev, floor),
		ranges:   capacity(ranges, floor),
		members:  capacity(members, floor),
		ct:       ct,
		affinity: ct / ctPerClient,
		// A reservation per masqueraded flow np_ct holds (at most half its
		// entries), and as many more of flows np_ct evicted that no sweep
		// (sweepSNAT) or probe took back yet.
		snat: ct,
		// An entry per endpoint address on a peer node: at most one per
		// endpoint slot.
		tunnels: capacity(backends, floor),
	}
}

// capacity is room for twice need, a power of two, at least floor.
func capacity(need, floor int) uint32 {
	if 2*need <= floor {
		return uint32(floor)
	}
	return 1 << bits.Len32(uint32(2*need-1))
}

// fits reports whether the maps of a family (named n) can hold want.
func fits[A addrBytes](l *loaded, n familyMaps, want *contentsOf[A]) bool {
	for name, count := range map[string]int{n.services: len(want.Services), n.backends: len(want.Backends),
		n.maglev: len(want.Maglev), n.ranges: len(want.Ranges), n.members: len(want.Members),
		n.tunnels: len(want.Tunnels)} {
		if uint32(count) > l.coll.Maps[name].MaxEntries() {
			return false
		}
	}
	return true
}

// Writes counts the map entries this Proxier has written or deleted.
func (p *Proxier) Writes() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes
}

// Close releases the Proxier's descriptors; the pins keep the programs
// attached and the maps (and flows) in place for the next svcproxy.
func (p *Proxier) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.background.Wait()
	if p.kernel != nil {
		p.kernel.close()
		p.kernel = nil
	}
	// Whatever loads the maps next reads them back.
	p.v4, p.v6 = newFamily[[4]byte](), newFamily[[16]byte]()
}

// Cleanup detaches the programs and removes every pin.
func (p *Proxier) Cleanup() error {
	p.Close()
	return Remove(p.o.PinDir)
}
