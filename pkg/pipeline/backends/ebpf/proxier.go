// Package ebpf is the eBPF backend's socket-level load balancing: cgroup
// v2 hooks on connect, sendmsg, recvmsg and getpeername translate a Service
// frontend to an endpoint when a socket addresses it, from maps rendered
// from desired's State.
package ebpf

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// DefaultPinDir is where maps and links are pinned unless Options say
// otherwise.
const DefaultPinDir = "/sys/fs/bpf/svcproxy"

// minCapacity is the smallest size of the service and backend maps. Their
// entries are allocated when written, so an unused capacity costs nothing.
const minCapacity = 1 << 16

// maxExpectedEntries bounds the entries an expected size may create the
// maps for: it is an estimate, and a State larger still grows them.
const maxExpectedEntries = 1 << 22

// Options configure a Proxier.
type Options struct {
	// PinDir is a directory on a bpffs; each family pins its maps and
	// links in a subdirectory. Empty means DefaultPinDir.
	PinDir string
	// Cgroup is the cgroup v2 directory the programs attach to: every
	// socket of a process in it or below it is translated.
	Cgroup string
	// NodeNetns is the cookie of the network namespace whose sockets are
	// the node's (desired's routes from the node); 0 means svcproxy's own.
	NodeNetns uint64
	// SocketEntries is how many translated sockets the reverse
	// translation map remembers (UDP replies, getpeername, socket
	// destruction); past it the least recently used are forgotten. 0
	// means DefaultSocketEntries.
	SocketEntries uint32
}

// Proxier programs one IP family's socket-level load balancing.
type Proxier struct {
	family proxy.IPFamily
	dir    string
	cgroup string
	netns  uint64
	// socketEntries is Options.SocketEntries.
	socketEntries uint32
	// minCapacity is minCapacity but in tests that grow maps.
	minCapacity uint32

	kernel *loaded
	tables tables
	// programmed is set once a Sync succeeded, for CanaryMissing.
	programmed atomic.Bool
	stats      atomic.Pointer[Stats]
	// store is what the ports claim and the maps hold (store.go).
	store  *store
	writes uint64
	// tl times the steps of the syncs until one succeeded (timeline.go).
	tl *timeline
	// sockets destroys translated sockets, beside the syncs.
	sockets *Sockets
	// expected, when set, tells the size the first State is expected
	// to have (ExpectSize).
	expected func(context.Context) (proxy.ExpectedSize, bool)
	// expectedNeed is the entries Prepare created the maps for, from
	// expected (0: none known), for its log line.
	expectedNeed int
}

// New returns a Proxier for family; nothing touches the kernel before the
// first Sync.
func New(family proxy.IPFamily, o Options) (*Proxier, error) {
	if o.Cgroup == "" {
		return nil, errors.New("ebpf: no cgroup to attach to")
	}
	if o.PinDir == "" {
		o.PinDir = DefaultPinDir
	}
	if o.NodeNetns == 0 {
		c, err := ownNetns()
		if err != nil {
			return nil, err
		}
		o.NodeNetns = c
	}
	if o.SocketEntries == 0 {
		o.SocketEntries = DefaultSocketEntries
	}
	dir := familyDir(o.PinDir, family)
	return &Proxier{family: family, dir: dir, cgroup: o.Cgroup, netns: o.NodeNetns, socketEntries: o.SocketEntries,
		minCapacity: minCapacity, store: newStore(), sockets: newSockets(family, dir, o.Cgroup)}, nil
}

// Init is part of the backend interface; loading waits for Prepare or the
// first State.
func (p *Proxier) Init(context.Context) error { return nil }

// ExpectSize is syncer.Sizer: Prepare asks expected for the size the
// first State is expected to have when it creates the service and backend
// maps, so that the first Sync fills them without growing them.
func (p *Proxier) ExpectSize(expected func(context.Context) (proxy.ExpectedSize, bool)) {
	p.expected = expected
}

// Prepare does ahead of the first Sync what needs no State: it loads the
// programs, attaches them, and reads the maps back. Pinned maps are
// adopted at their size. Missing ones are created at the size the first
// State is expected to have (ExpectSize), which Prepare waits for, or
// with the smallest capacity when none is known. The syncer runs it while
// the informers' initial lists arrive, so that the first Sync only
// renders, writes the difference and, when the State outgrows the maps,
// moves the programs to larger ones. A failure leaves it all to the first
// Sync.
func (p *Proxier) Prepare(ctx context.Context) error {
	p.tl = newTimeline()
	defer func() { p.tl = nil }()
	if p.kernel == nil {
		capacity, err := p.preparedCapacity(ctx)
		if err != nil {
			return err
		}
		if err := p.load(capacity); err != nil {
			return err
		}
	}
	if err := p.store.readBack(p.tables); err != nil {
		p.store.syncs.Failed()
		return err
	}
	p.tl.step("readBack")
	p.tl.log("Socket hooks prepared", "ipFamily", p.family, "capacity", p.kernel.mapOf(mapServices).MaxEntries(),
		"expectedEntries", p.expectedNeed,
		"records", p.store.records.KernelLen(), "slots", p.store.slots.KernelLen())
	return nil
}

// Sync makes the maps hold what st renders to, writing only the
// difference. The engine's plan (reconcile.Syncs) says how much: a
// PartialSync renders only the service ports of st.Changed, a FullSync
// every one, and a RecoverySync (as every sync after a failure) first
// reads the maps back. Maps too small for the State are grown. Until one
// succeeded, each logs how long its steps took.
func (p *Proxier) Sync(_ context.Context, st *desired.State, mode proxy.SyncMode) error {
	if mode == proxy.PartialSync && st.Changed == nil {
		mode = proxy.FullSync // the State does not say what changed
	}
	plan, err := p.store.syncs.Begin(mode, fmt.Sprintf("ebpf %s", p.family))
	if err != nil {
		return err
	}
	if !p.programmed.Load() {
		p.tl = newTimeline()
		defer func() { p.tl = nil }()
	}
	full, changed := p.store.scope(st, plan)
	parts := p.store.render(st, full, changed)
	p.tl.step("render")
	if err := p.ready(mode, plan, p.capacityFor(uint32(p.store.need(parts, full)))); err != nil {
		p.store.syncs.Failed() // the IDs render took are not claimed
		return err
	}
	p.store.claim(parts, full)
	p.tl.step("claim")
	var n int
	if need := max(p.store.records.Len(), p.store.slots.Len()); !p.fits(need) {
		n, err = p.grow(p.capacityFor(uint32(need)))
	} else {
		n, err = p.store.write(p.tables)
		p.writes += uint64(n)
	}
	if err != nil {
		return err
	}
	p.tl.step("write")
	p.tl.log("Socket hooks' first sync", "ipFamily", p.family, "mode", mode, "written", n)
	p.store.prev = st
	p.published()
	return nil
}

// ready loads the programs and maps (capacity: for a first load), or pins
// them again for a RecoverySync, and reads the maps back when the plan
// says so.
func (p *Proxier) ready(mode proxy.SyncMode, plan reconcile.Plan, capacity uint32) error {
	if p.kernel == nil {
		if err := p.load(capacity); err != nil {
			return err
		}
	} else if mode == proxy.RecoverySync {
		if err := p.repin(capacity); err != nil {
			return err
		}
	}
	if plan.ReadBack {
		if err := p.store.readBack(p.tables); err != nil {
			return err
		}
		p.tl.step("readBack")
	}
	return nil
}

// grow moves the programs to maps of capacity entries, filled with the
// claims (their slots stabilized against the old maps) before any hook
// uses them, and returns how many entries it wrote.
func (p *Proxier) grow(capacity uint32) (int, error) {
	next, err := p.kernel.grow(p.progConfig(), capacity)
	if err != nil {
		p.store.syncs.Failed()
		return 0, err
	}
	p.tl.step("grow")
	t := tablesOf(next)
	p.store.emptied()
	n, err := p.store.write(t)
	p.writes += uint64(n)
	if err == nil {
		err = p.kernel.swap(next, p.dir)
	}
	if err != nil {
		next.close()
		p.store.syncs.Failed()
		return n, err
	}
	p.kernel, p.tables = next, t
	return n, nil
}

func (p *Proxier) load(capacity uint32) error {
	l, err := load(p.progConfig(), p.dir, p.cgroup, capacity, p.tl)
	if err != nil {
		return err
	}
	p.kernel, p.tables = l, tablesOf(l)
	return nil
}

func (p *Proxier) progConfig() progConfig {
	return progConfig{family: p.family, nodeNetns: p.netns, sockets: p.socketEntries}
}

func tablesOf(l *loaded) tables {
	return tables{
		services: kernelTable[svcKey, svcVal]{l.mapOf(mapServices)},
		backends: kernelTable[beKey, beVal]{l.mapOf(mapBackends)},
	}
}

// fits reports whether both maps can hold need entries.
func (p *Proxier) fits(need int) bool {
	return need <= int(p.kernel.mapOf(mapServices).MaxEntries()) &&
		need <= int(p.kernel.mapOf(mapBackends).MaxEntries())
}

// capacityFor sizes the service and backend maps for need entries, with
// room to double before they must grow.
func (p *Proxier) capacityFor(need uint32) uint32 {
	if need <= p.minCapacity/2 {
		return p.minCapacity
	}
	return 1 << bits.Len32(2*need-1)
}

// Writes counts the map entries this Proxier has written or deleted.
func (p *Proxier) Writes() uint64 { return p.writes }

// Close releases the Proxier's descriptors; the pins keep the programs
// attached and the maps in place for the next svcproxy.
func (p *Proxier) Close() {
	p.sockets.Close()
	if p.kernel != nil {
		p.kernel.close()
		p.kernel = nil
	}
	p.store = newStore()
}

// Cleanup detaches the family's programs and removes its pins and maps,
// whether this Proxier loaded them or a previous svcproxy did.
func (p *Proxier) Cleanup(context.Context) error {
	p.Close()
	p.programmed.Store(false)
	p.stats.Store(nil)
	if err := bpfmap.RemovePins(p.dir); err != nil {
		return fmt.Errorf("ebpf: cleanup of %s: %w", p.dir, err)
	}
	// The shared parent goes with the last family (a bpffs mounted
	// there cannot go, and keeps the kernel's own files).
	if err := os.Remove(filepath.Dir(p.dir)); err != nil && !errors.Is(err, os.ErrNotExist) && !isNotEmpty(err) {
		return err
	}
	return nil
}

// preparedCapacity is the capacity of the service and backend maps
// Prepare creates: on a node where none is pinned, room for the entries
// the expected State claims (a cluster IP port's record and its any-port
// record, and a slot per endpoint and port); else, or when no size is
// known, the smallest, as pinned maps are adopted at their own size.
func (p *Proxier) preparedCapacity(ctx context.Context) (uint32, error) {
	p.expectedNeed = 0
	if p.expected == nil {
		return p.minCapacity, nil
	}
	switch pinned, err := mapsPinned(p.dir); {
	case err != nil:
		return 0, err
	case pinned:
		return p.minCapacity, nil
	}
	size, ok := p.expected(ctx)
	p.tl.step("sizeWait")
	if !ok {
		return p.minCapacity, nil
	}
	p.expectedNeed = min(max(2*size.ServicePorts, size.EndpointPorts), maxExpectedEntries)
	return p.capacityFor(uint32(p.expectedNeed)), nil
}
