package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	// The tests' sync helper takes the package's name.
	stdsync "sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Sockets shows one family's connected UDP sockets whose destination a
// hook translated as conntrack flows, and destroys the ones it is told to.
// A translated socket is what a DNATed conntrack flow is in the other
// modes: it was sent to a frontend (the original destination) and talks
// to an endpoint (the reply's source), and it keeps that endpoint until
// the socket closes, as the flow keeps it until it expires. So the
// conntrack cleanup's rule, run on these flows, picks the sockets whose
// endpoint no longer serves their frontend, and Delete destroys them: the
// application's next call fails (ECONNABORTED, then EDESTADDRREQ for a
// write without an address) and a new socket is translated afresh.
//
// Only sockets of processes in the cgroup the hooks attach to (or below)
// are looked at, in each of their network namespaces, and of those only
// the ones the reverse translation map records. TCP is never listed:
// the conntrack rule leaves TCP alone, and a TCP peer notices a dead
// endpoint by itself.
//
// It implements kconntrack.Interface; List and Delete are called from one
// goroutine at a time, beside the syncs: it reads the pinned maps, never
// the Proxier.
type Sockets struct {
	family proxy.IPFamily
	dir    string
	cgroup string

	// mu guards what follows against Close, from another goroutine.
	mu stdsync.Mutex
	// it is the socket iterator, kept loaded over the reverse translation
	// map whose ID is revnat: loading it (the kernel's BTF, the verifier)
	// costs a round far more than running it in every namespace.
	it     *iterator
	revnat ebpf.MapID
	// listed maps the flows of the last List to their sockets.
	listed    map[kconntrack.Flow][]sockRef
	destroyed atomic.Uint64
	// support is 0 until known, then 1 (supported) or 2 (not).
	support atomic.Uint32
}

// sockRef names one socket: its cookie is unique on the host, its network
// namespace is where an iterator finds it.
type sockRef struct {
	cookie uint64
	netns  netnsID
}

// Sockets returns the socket view of p's family.
func (p *Proxier) Sockets() *Sockets { return p.sockets }

func newSockets(family proxy.IPFamily, dir, cgroup string) *Sockets {
	return &Sockets{family: family, dir: dir, cgroup: cgroup}
}

// Destroyed counts the sockets destroyed so far.
func (s *Sockets) Destroyed() uint64 { return s.destroyed.Load() }

// Supported reports whether this kernel can destroy sockets; known is
// false until a List has tried.
func (s *Sockets) Supported() (supported, known bool) {
	v := s.support.Load()
	return v == 1, v != 0
}

// List is part of kconntrack.Interface: it visits one flow per translated
// connected UDP socket of family. Before the hooks' first load, and on a
// kernel that cannot destroy sockets, there are none.
func (s *Sockets) List(ctx context.Context, family proxy.IPFamily, visit func(kconntrack.Flow)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listed = map[kconntrack.Flow][]sockRef{}
	it, err := s.open()
	if it == nil || err != nil {
		return err
	}
	return it.each(ctx, s.cgroup, nil, func(ns netnsID, r sockRec) {
		f := r.flow()
		s.listed[f] = append(s.listed[f], sockRef{r.Cookie, ns})
		visit(f)
	})
}

// Delete is part of kconntrack.Interface: it destroys the sockets of flows
// (as the last List saw them) and returns how many of flows are gone.
func (s *Sockets) Delete(ctx context.Context, family proxy.IPFamily, flows []kconntrack.Flow) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, err := s.open()
	if it == nil || err != nil {
		return 0, err
	}
	where := map[netnsID]bool{}
	var cookies []uint64
	for _, f := range flows {
		for _, ref := range s.listed[f] {
			cookies = append(cookies, ref.cookie)
			where[ref.netns] = true
		}
	}
	// The map holds as many cookies as the reverse translation map holds
	// sockets; a longer list goes in turns.
	for len(cookies) > 0 {
		n := min(len(cookies), int(it.doomed.MaxEntries()))
		if err := it.destroy(ctx, s.cgroup, where, cookies[:n], &s.destroyed); err != nil {
			return 0, err
		}
		cookies = cookies[n:]
	}
	return len(flows), nil
}

// Remembered counts the reverse translations the pinned map holds, with
// its capacity; ok is false before the hooks' first load. Past the
// capacity the map forgets the least recently used sockets (README.md,
// "Sockets beyond the bound"). It reads every entry, a batch per system
// call, so it is for a scrape, not a sync.
func (s *Sockets) Remembered() (entries int, capacity uint32, ok bool, err error) {
	revnat, err := ebpf.LoadPinnedMap(filepath.Join(s.dir, mapRevNAT), nil)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("opening the pinned map %s: %w", mapRevNAT, err)
	}
	defer revnat.Close()
	err = kernelTable[revKey, beVal]{revnat}.each(func(revKey, beVal) error { entries++; return nil })
	return entries, revnat.MaxEntries(), err == nil, err
}

// Close releases the socket iterator.
func (s *Sockets) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop()
}

func (s *Sockets) drop() {
	if s.it != nil {
		s.it.close()
		s.it = nil
	}
}

// open returns the socket iterator over the family's pinned reverse
// translation map, loading it when that map is not the one it was loaded
// over (the first round, or the map was replaced); nil without an error
// when there is nothing to look at: no map pinned, or a kernel without
// socket destruction, which is logged once.
func (s *Sockets) open() (*iterator, error) {
	if s.support.Load() == 2 {
		return nil, nil
	}
	revnat, err := ebpf.LoadPinnedMap(filepath.Join(s.dir, mapRevNAT), nil)
	if errors.Is(err, os.ErrNotExist) {
		s.drop()
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening the pinned map %s: %w", mapRevNAT, err)
	}
	defer revnat.Close()
	info, err := revnat.Info()
	if err != nil {
		return nil, fmt.Errorf("reading the pinned map %s: %w", mapRevNAT, err)
	}
	id, _ := info.ID()
	if s.it != nil && id == s.revnat {
		return s.it, nil
	}
	s.drop()
	it, err := loadIterator(revnat)
	if errors.Is(err, ebpf.ErrNotSupported) {
		if s.support.Swap(2) != 2 {
			klog.InfoS("This kernel cannot destroy sockets (bpf_sock_destroy needs kernel 6.5): "+
				"a connected UDP socket keeps an endpoint that went away until it is closed",
				"ipFamily", s.family, "err", err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.support.Store(1)
	s.it, s.revnat = it, id
	return it, nil
}

// flow is the socket as a conntrack flow: sent from its local address to
// the frontend, answered by the endpoint.
func (r sockRec) flow() kconntrack.Flow {
	local := beVal{Addr: r.Local, Port: r.Lport}.AddrPort()
	return kconntrack.Flow{
		Proto: kconntrack.ProtoUDP,
		Orig:  kconntrack.Tuple{Src: local, Dst: beVal{Addr: r.Front, Port: r.Fport}.AddrPort()},
		Reply: kconntrack.Tuple{Src: beVal{Addr: r.Peer, Port: r.Pport}.AddrPort(), Dst: local},
	}
}
