package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The maps of one family, by the name bpf/sock.c gives them; each is pinned
// under the family's directory by that name.
const (
	mapServices = "services"
	mapBackends = "backends"
	mapRevNAT   = "revnat"
	mapAffinity = "affinity"
)

// Capacities of the LRU maps: they hold per-socket and per-client state,
// which the LRU evicts, not anything the State sizes. The reverse
// translation map's is an option (Options.SocketEntries).
const (
	DefaultSocketEntries = 1 << 16
	affinityEntries      = 1 << 16
)

// progConfig is what a family's programs are loaded with, beside the
// capacity of the service and backend maps.
type progConfig struct {
	family proxy.IPFamily
	// nodeNetns is the cookie of the node's network namespace.
	nodeNetns uint64
	// sockets is the capacity of the reverse translation map.
	sockets uint32
}

// hooks lists a family's programs and where each attaches. The IPv4
// family's include three at IPv6 hooks, for IPv4 destinations addressed
// by AF_INET6 sockets as IPv4-mapped addresses (bpf/sock.c).
func hooks(family proxy.IPFamily) map[string]ebpf.AttachType {
	if family == proxy.IPv6 {
		return map[string]ebpf.AttachType{
			"connect6": ebpf.AttachCGroupInet6Connect, "sendmsg6": ebpf.AttachCGroupUDP6Sendmsg,
			"recvmsg6": ebpf.AttachCGroupUDP6Recvmsg, "getpeername6": ebpf.AttachCgroupInet6GetPeername,
		}
	}
	return map[string]ebpf.AttachType{
		"connect4": ebpf.AttachCGroupInet4Connect, "sendmsg4": ebpf.AttachCGroupUDP4Sendmsg,
		"recvmsg4": ebpf.AttachCGroupUDP4Recvmsg, "getpeername4": ebpf.AttachCgroupInet4GetPeername,
		"connect4in6": ebpf.AttachCGroupInet6Connect, "recvmsg4in6": ebpf.AttachCGroupUDP6Recvmsg,
		"getpeername4in6": ebpf.AttachCgroupInet6GetPeername,
	}
}

// loaded is one family's programs and maps in the kernel.
type loaded struct {
	coll  *ebpf.Collection
	links map[string]link.Link
}

func (l *loaded) mapOf(name string) *ebpf.Map { return l.coll.Maps[name] }

func (l *loaded) close() {
	for _, lk := range l.links {
		lk.Close()
	}
	l.coll.Close()
}

// programSpec is the family's programs and their maps, sized: the service
// and backend maps to capacity, the LRU maps to theirs. The programs are
// told which network namespace is the node's.
func programSpec(c progConfig, capacity uint32) (*ebpf.CollectionSpec, error) {
	spec, err := loadSock()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["host_netns"].Set(c.nodeNetns); err != nil {
		return nil, err
	}
	progs := hooks(c.family)
	for name := range spec.Programs {
		if _, ok := progs[name]; !ok {
			delete(spec.Programs, name)
		}
	}
	// The socket iterator's map comes with the iterator (sockiter.go).
	delete(spec.Maps, mapDoomed)
	sizes := map[string]uint32{mapServices: capacity, mapBackends: capacity,
		mapRevNAT: c.sockets, mapAffinity: affinityEntries}
	for name, size := range sizes {
		spec.Maps[name].MaxEntries = size
	}
	return spec, nil
}

// load loads a family's programs, adopting the maps pinned in dir (new
// maps get capacity; Sync grows adopted ones that are too small), and
// attaches every program to the cgroup, replacing the program of a pinned
// link in place, so that no socket goes untranslated meanwhile. Everything
// is pinned in dir. A pinned reverse translation map of another size than
// c.sockets is replaced by one of that size holding its entries.
func load(c progConfig, dir, cgroup string, capacity uint32, tl *timeline) (*loaded, error) {
	if err := isCgroup2(cgroup); err != nil {
		return nil, err
	}
	spec, err := programSpec(c, capacity)
	if err != nil {
		return nil, err
	}
	resized, err := pinnedOfOtherSize(dir, mapRevNAT, c.sockets)
	if err != nil {
		return nil, err
	}
	tl.step("spec")
	adopt := []string{mapServices, mapBackends, mapRevNAT, mapAffinity}
	if resized != nil {
		defer resized.Close()
		adopt = []string{mapServices, mapBackends, mapAffinity}
	}
	coll, err := bpfmap.LoadAdopting(spec, dir, adopt)
	if err != nil {
		return nil, fmt.Errorf("loading the %s socket programs: %w", c.family, err)
	}
	tl.step("programs")
	l := &loaded{coll: coll, links: map[string]link.Link{}}
	if resized != nil {
		if err := l.resizeRevNAT(resized, dir); err != nil {
			l.close()
			return nil, err
		}
	}
	for name, attach := range hooks(c.family) {
		if err := l.attach(name, attach, dir, cgroup); err != nil {
			l.close()
			return nil, err
		}
	}
	tl.step("attach")
	return l, nil
}

// grow loads the family's programs again with service and backend maps of
// capacity entries, sharing l's LRU maps (per-socket and per-client state
// survives). The caller fills the new maps, then calls swap.
func (l *loaded) grow(c progConfig, capacity uint32) (*loaded, error) {
	spec, err := programSpec(c, capacity)
	if err != nil {
		return nil, err
	}
	opts := ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		mapRevNAT: l.mapOf(mapRevNAT), mapAffinity: l.mapOf(mapAffinity)}}
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		return nil, fmt.Errorf("loading the %s socket programs with larger maps: %w", c.family, err)
	}
	return &loaded{coll: coll, links: map[string]link.Link{}}, nil
}

// swap moves l's links to next's programs, one atomic update per hook: a
// socket meets either the old maps or the new ones, both complete. Then
// next's maps replace l's pins, and l is closed.
func (l *loaded) swap(next *loaded, dir string) error {
	for name, lk := range l.links {
		if err := lk.Update(next.coll.Programs[name]); err != nil {
			return fmt.Errorf("moving link %s to the grown maps: %w", name, err)
		}
		next.links[name] = lk
	}
	l.links = nil
	for _, name := range []string{mapServices, mapBackends} {
		if err := bpfmap.ReplacePin(next.mapOf(name), dir, name); err != nil {
			return err
		}
	}
	l.close()
	return nil
}

// resizeRevNAT fills l's reverse translation map, of another size than
// old (the pinned one), with old's entries, and pins it in old's place.
// Entries the old programs add meanwhile, until attach swaps the links'
// programs, are lost: those sockets' replies show the endpoint.
func (l *loaded) resizeRevNAT(old *ebpf.Map, dir string) error {
	from := kernelTable[revKey, beVal]{old}
	to := l.mapOf(mapRevNAT)
	err := from.each(func(k revKey, v beVal) error { return to.Put(k, v) })
	if err != nil {
		return fmt.Errorf("copying the reverse translations to a map of %d entries: %w", to.MaxEntries(), err)
	}
	return bpfmap.ReplacePin(to, dir, mapRevNAT)
}

// pinnedOfOtherSize opens the map pinned as name in dir if its capacity is
// not size; nil if it is, or if none is pinned.
func pinnedOfOtherSize(dir, name string, size uint32) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("adopting pinned map %s: %w", name, err)
	}
	if m.MaxEntries() == size {
		m.Close()
		return nil, nil
	}
	return m, nil
}

// attach attaches program name to the cgroup through the link pinned in
// dir when there is one (swapping its program atomically), else through a
// new link it pins.
func (l *loaded) attach(name string, attach ebpf.AttachType, dir, cgroup string) error {
	lk, err := bpfmap.AttachPinned(filepath.Join(dir, "link_"+name), l.coll.Programs[name], func() (link.Link, error) {
		lk, err := link.AttachCgroup(link.CgroupOptions{Path: cgroup, Attach: attach, Program: l.coll.Programs[name]})
		if err != nil {
			return nil, fmt.Errorf("attaching %s to cgroup %s: %w", name, cgroup, err)
		}
		return lk, nil
	})
	if err != nil {
		return err
	}
	l.links[name] = lk
	return nil
}

// soNetnsCookie is SO_NETNS_COOKIE (kernel 5.14), which x/sys does not name.
const soNetnsCookie = 71

// ownNetns returns the cookie of this process's network namespace, the one
// the hooks compare with bpf_get_netns_cookie.
func ownNetns() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, soNetnsCookie)
	if err != nil {
		return 0, fmt.Errorf("reading the network namespace cookie (kernel 5.14 or later): %w", err)
	}
	return v, nil
}

// isCgroup2 fails unless dir is a directory of a cgroup v2 hierarchy: the
// socket hooks attach nowhere else.
func isCgroup2(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("ebpf: the cgroup to attach to: %w", err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("ebpf: %s is not a cgroup v2 directory (mount -t cgroup2 gives one)", dir)
	}
	return nil
}

// mapsPinned reports whether dir holds a pinned service or backend map:
// an earlier svcproxy's, which a load adopts with its entries.
func mapsPinned(dir string) (bool, error) {
	for _, name := range []string{mapServices, mapBackends} {
		_, err := os.Stat(filepath.Join(dir, name))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("looking for pinned map %s: %w", name, err)
		}
	}
	return false, nil
}
