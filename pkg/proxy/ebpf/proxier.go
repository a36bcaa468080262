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
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// DefaultPinDir is where maps and links are pinned unless Options say
// otherwise.
const DefaultPinDir = "/sys/fs/bpf/svcproxy"

// minCapacity is the smallest size of the service and backend maps. Their
// entries are allocated when written, so an unused capacity costs nothing.
const minCapacity = 1 << 16

// Options configure a Proxier.
type Options struct {
	// PinDir is a directory on a bpffs; each family pins its maps and
	// links in a subdirectory. Empty means DefaultPinDir.
	PinDir string
	// Cgroup is the cgroup v2 directory the programs attach to: every
	// socket of a process in it or below it is translated.
	Cgroup string
}

// Proxier programs one IP family's socket-level load balancing.
type Proxier struct {
	family proxy.IPFamily
	dir    string
	cgroup string

	kernel *loaded
	tables tables
	// committed is what the maps hold; nil when unknown (read back).
	committed *Contents
	writes    uint64
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
	return &Proxier{family: family, dir: filepath.Join(o.PinDir, strings.ToLower(string(family))), cgroup: o.Cgroup}, nil
}

// Init is part of the backend interface; loading waits for the first
// State, which sizes the maps.
func (p *Proxier) Init(context.Context) error { return nil }

// Sync makes the maps hold what st renders to. Every sync renders the
// whole State; only the difference from the maps is written. A
// RecoverySync first reads the maps back.
func (p *Proxier) Sync(_ context.Context, st *desired.State, mode proxy.SyncMode) error {
	want := Render(st)
	need := uint32(max(len(want.Services), len(want.Backends)))
	if p.kernel == nil {
		l, err := load(p.family, p.dir, p.cgroup, need, capacityFor(need))
		if err != nil {
			return err
		}
		p.kernel = l
		p.tables = tables{
			services: kernelTable[svcKey, svcVal]{l.mapOf(mapServices)},
			backends: kernelTable[beKey, beVal]{l.mapOf(mapBackends)},
		}
		p.committed = nil
	}
	if c := p.kernel.mapOf(mapServices).MaxEntries(); need > c {
		return fmt.Errorf("ebpf: the State needs %d map entries, the maps hold %d: growing maps is not implemented", need, c)
	}
	if mode == proxy.RecoverySync || p.committed == nil {
		have, err := readBack(p.tables)
		if err != nil {
			return err
		}
		p.committed = have
	}
	n, err := apply(p.tables, p.committed, &want)
	p.writes += uint64(n)
	if err != nil {
		p.committed = nil
		return err
	}
	p.committed = &want
	return nil
}

func readBack(t tables) (*Contents, error) {
	s, err := t.services.dump()
	if err != nil {
		return nil, fmt.Errorf("reading back the service map: %w", err)
	}
	b, err := t.backends.dump()
	if err != nil {
		return nil, fmt.Errorf("reading back the backend map: %w", err)
	}
	return &Contents{Services: s, Backends: b}, nil
}

// capacityFor sizes the service and backend maps for need entries, with
// room to double before they must grow.
func capacityFor(need uint32) uint32 {
	if need <= minCapacity/2 {
		return minCapacity
	}
	return 1 << bits.Len32(2*need-1)
}

// Writes counts the map entries this Proxier has written or deleted.
func (p *Proxier) Writes() uint64 { return p.writes }

// Close releases the Proxier's descriptors; the pins keep the programs
// attached and the maps in place for the next svcproxy.
func (p *Proxier) Close() {
	if p.kernel != nil {
		p.kernel.close()
		p.kernel = nil
	}
}

// Cleanup detaches the family's programs and removes its pins and maps,
// whether this Proxier loaded them or a previous svcproxy did.
func (p *Proxier) Cleanup(context.Context) error {
	p.Close()
	if err := remove(p.family, p.dir); err != nil {
		return fmt.Errorf("ebpf: cleanup of %s: %w", p.dir, err)
	}
	// The shared parent goes with the last family (a bpffs mounted
	// there cannot go, and keeps the kernel's own files).
	if err := os.Remove(filepath.Dir(p.dir)); err != nil && !errors.Is(err, os.ErrNotExist) && !isNotEmpty(err) {
		return err
	}
	return nil
}
