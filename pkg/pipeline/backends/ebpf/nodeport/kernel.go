package nodeport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The maps, by the names bpf/nodeport.c gives them; each is pinned by that
// name, or by the name of its layout's version (pinName).
const (
	mapServices = "np_services"
	mapBackends = "np_backends"
	mapMaglev   = "np_maglev"
	mapDevices  = "np_devices"
	mapConfig   = "np_config"
	mapCT       = "np_ct"
	mapRanges   = "np_ranges"
	mapMembers  = "np_members"
	mapAffinity = "np_affinity"
	mapSNAT     = "np_snat"
	mapTunnels  = "np_tunnels"
	mapPeers    = "np_peers"
)

// familyMaps are the names of one family's maps: IPv4's above, IPv6's
// the same with a 6 (bpf/six.h).
type familyMaps struct {
	services, backends, maglev, config, ct, ranges, members, affinity, snat, tunnels, peers string
}

var (
	maps4 = familyMaps{mapServices, mapBackends, mapMaglev, mapConfig, mapCT, mapRanges, mapMembers, mapAffinity, mapSNAT,
		mapTunnels, mapPeers}
	maps6 = familyMaps{mapServices + "6", mapBackends + "6", mapMaglev + "6", mapConfig + "6", mapCT + "6",
		mapRanges + "6", mapMembers + "6", mapAffinity + "6", mapSNAT + "6", mapTunnels + "6", mapPeers + "6"}
)

// namesOf is the names of the maps of A's family.
func namesOf[A addrBytes]() familyMaps {
	if familyOf[A]() == proxy.IPv6 {
		return maps6
	}
	return maps4
}

func (n familyMaps) all() []string {
	return []string{n.services, n.backends, n.maglev, n.config, n.ct, n.ranges, n.members, n.affinity, n.snat,
		n.tunnels, n.peers}
}

var mapNames = append(append([]string{mapDevices, mapXDPOut, mapStats, mapStats6, mapProgs6, mapStatsDSR, mapProgsTun}, maps4.all()...), maps6.all()...)

// layoutVersions are the maps whose layout (type, key, value, flags, inner
// map) changed since svcproxy first pinned them, with their layout's
// version: such a map is pinned as name_vN (pinName), so that a pin name
// only ever holds one layout. Another version of svcproxy then finds
// under each name it uses the layout it reads or nothing (and creates it):
// it never meets a layout it would refuse, and both adopt every map whose
// layout they share (the conntrack table among them, so flows survive a
// downgrade and the upgrade after it). testdata/pins.txt records every
// pin name's layout, and TestPinLayouts fails when a layout changes under
// a name.
var layoutVersions = map[string]int{mapMaglev: 2}

// pinName is the name map is pinned by.
func pinName(m string) string {
	if v := layoutVersions[m]; v > 1 {
		return fmt.Sprintf("%s_v%d", m, v)
	}
	return m
}

// pinNames maps each map to its pin name.
func pinNames() map[string]string {
	pins := map[string]string{}
	for _, m := range mapNames {
		pins[m] = pinName(m)
	}
	return pins
}

// The tc programs svcproxy attaches, and where (np_xdp: xdp.go).
var hooks = map[string]ebpf.AttachType{"np_ingress": ebpf.AttachTCXIngress, "np_egress": ebpf.AttachTCXEgress}

// sizes are the capacities of one family's maps the State sizes.
type sizes struct{ services, backends, maglev, ranges, members, ct, affinity, snat, tunnels uint32 }

// familySizes are both families' sizes.
type familySizes map[proxy.IPFamily]sizes

// loaded is the programs and maps in the kernel, and their links.
type loaded struct {
	coll *ebpf.Collection
	// links are the tc links, by the program each runs.
	links []progLink
	// xdp are np_xdp's links, on xdpIfaces.
	xdp       []link.Link
	xdpIfaces []string
}

func (l *loaded) close() {
	for _, pl := range l.links {
		pl.lk.Close()
	}
	l.closeXDP()
	l.coll.Close()
}

// programSpec is the tc programs, np_xdp and their maps, sized; the
// test-only programs are left out.
func programSpec(fs familySizes) (*ebpf.CollectionSpec, error) {
	spec, err := loadNodeport()
	if err != nil {
		return nil, err
	}
	if err := setKernelConntrack(spec, kernelConntrackKfuncs()); err != nil {
		return nil, err
	}
	for name := range spec.Programs {
		if _, ok := hooks[name]; !ok && name != progXDP && !slices.Contains(progs6, name) && !slices.Contains(progsTun, name) {
			delete(spec.Programs, name)
		}
	}
	for family, names := range map[proxy.IPFamily]familyMaps{proxy.IPv4: maps4, proxy.IPv6: maps6} {
		sz, ok := fs[family]
		if !ok {
			sz = sizesOf(minEntries, 0, 0, 0, 0, 0, 0)
		}
		for name, n := range map[string]uint32{names.services: sz.services, names.backends: sz.backends,
			names.maglev: sz.maglev, names.ranges: sz.ranges, names.members: sz.members, names.ct: sz.ct,
			names.affinity: sz.affinity, names.snat: sz.snat, names.tunnels: sz.tunnels} {
			spec.Maps[name].MaxEntries = n
		}
	}
	return spec, nil
}

// load loads the programs, adopting the maps pinned in dir (the flows of
// the conntrack table survive a restart), pins new maps, and attaches both
// tc programs, and np_xdp as accel says, to each interface, swapping the
// program of a pinned link in place. Interfaces are looked up in the
// caller's network namespace.
func load(dir string, ifaces []string, accel Acceleration, sz familySizes) (*loaded, error) {
	spec, err := programSpec(sz)
	if err != nil {
		return nil, err
	}
	coll, err := bpfmap.LoadAdoptingAs(spec, dir, pinNames())
	if err != nil {
		return nil, fmt.Errorf("loading the tc node-port programs: %w", err)
	}
	l := &loaded{coll: coll}
	if err := l.fillProgArrays(); err != nil {
		l.close()
		return nil, err
	}
	for _, iface := range ifaces {
		if err := l.attachAll(dir, iface, accel); err != nil {
			l.close()
			return nil, err
		}
	}
	if err := l.removeUnowned(dir, ifaces); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// removeUnowned removes from dir what this load does not own. It detaches
// the links it did not attach (on interfaces no longer listed, np_xdp's
// where acceleration is off or the driver refused it, another version's
// links by names this one does not use) and forgets those interfaces, so
// that a start with fewer --bpf-tc-interfaces, or without
// --bpf-acceleration, leaves no program behind. It removes every other pin
// that is not one of its maps' (another version's maps, of layouts this
// one does not read): their memory would stay taken, and a later version
// that pins a map by that name would find stale contents. This load's
// links are attached by then, so no program reads what goes.
func (l *loaded) removeUnowned(dir string, ifaces []string) error {
	owned := map[string]bool{}
	for _, iface := range ifaces {
		for name := range hooks {
			owned[filepath.Base(linkPin(dir, name, iface))] = true
		}
	}
	for _, iface := range l.xdpIfaces {
		owned[filepath.Base(linkPin(dir, progXDP, iface))] = true
	}
	for _, pin := range pinNames() {
		owned[pin] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !owned[e.Name()] && !bpfmap.KernelFile(e.Name()) {
			errs = append(errs, bpfmap.RemovePin(filepath.Join(dir, e.Name())))
		}
	}
	errs = append(errs, keepOnly(l.coll.Maps[mapDevices], ifaces), keepOnly(l.coll.Maps[mapXDPOut], l.xdpIfaces))
	return errors.Join(errs...)
}

// keepOnly deletes the ifindexes of m that are not those of ifaces.
func keepOnly(m *ebpf.Map, ifaces []string) error {
	devs := map[uint32]bool{}
	for _, iface := range ifaces {
		if dev, err := net.InterfaceByName(iface); err == nil {
			devs[uint32(dev.Index)] = true
		}
	}
	var gone []uint32
	var idx, val uint32
	it := m.Iterate()
	for it.Next(&idx, &val) {
		if !devs[idx] {
			gone = append(gone, idx)
		}
	}
	errs := []error{it.Err()}
	for _, idx := range gone {
		errs = append(errs, m.Delete(idx))
	}
	return errors.Join(errs...)
}

// attachAll attaches both tc programs to iface, and np_xdp as accel says,
// and records it as a node interface in np_devices.
func (l *loaded) attachAll(dir, iface string, accel Acceleration) error {
	dev, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("tc node ports: interface %s: %w", iface, err)
	}
	for name, attach := range hooks {
		if err := l.attach(name, attach, dir, dev); err != nil {
			return err
		}
	}
	idx := uint32(dev.Index)
	if err := l.coll.Maps[mapDevices].Put(idx, idx); err != nil {
		return err
	}
	return l.attachXDP(dir, dev, accel)
}

// attach attaches program name to dev through the link pinned in dir when
// there is one (swapping its program atomically), else a new pinned link.
func (l *loaded) attach(name string, attach ebpf.AttachType, dir string, dev *net.Interface) error {
	prog := l.coll.Programs[name]
	lk, err := bpfmap.AttachPinned(linkPin(dir, name, dev.Name), prog, func() (link.Link, error) {
		lk, err := link.AttachTCX(link.TCXOptions{Interface: dev.Index, Program: prog, Attach: attach})
		if err != nil {
			return nil, fmt.Errorf("attaching %s to %s: %w", name, dev.Name, err)
		}
		return lk, nil
	})
	if err != nil {
		return err
	}
	l.links = append(l.links, progLink{name, lk})
	return nil
}

func linkPin(dir, prog, iface string) string { return filepath.Join(dir, "link_"+prog+"_"+iface) }

// Remove detaches the programs pinned in dir and removes the pins and dir;
// what is not there is not an error.
func Remove(dir string) error { return bpfmap.RemovePins(dir) }

// mapProgs6 is the program array through which np_ingress and np_egress
// hand IPv6 packets to progs6 (its slots in that order), by a tail call.
const mapProgs6 = "np_progs6"

// mapProgsTun holds the programs a decapsulated packet goes on in
// (np_progs_tun); mapStatsDSR counts what DSR drops (np_stats_dsr).
const (
	mapProgsTun = "np_progs_tun"
	mapStatsDSR = "np_stats_dsr"
)

var progs6 = []string{"np_ingress6", "np_egress6"}

// progsTun are the programs of np_progs_tun, in its slots' order: IPv4's
// (NP_PROG_TUN); IPv6 decapsulates nothing yet.
var progsTun = []string{"np_ingress_tun"}

// fillProgArrays points np_progs6 at l's IPv6 programs and np_progs_tun
// at its program for decapsulated packets: np_ingress and np_egress of any
// load sharing the arrays (a pinned one, the programs before a growth)
// hand those packets to these from then on.
func (l *loaded) fillProgArrays() error {
	for array, progs := range map[string][]string{mapProgs6: progs6, mapProgsTun: progsTun} {
		for slot, name := range progs {
			if err := l.coll.Maps[array].Put(uint32(slot), l.coll.Programs[name]); err != nil {
				return fmt.Errorf("putting %s in %s: %w", name, array, err)
			}
		}
	}
	return nil
}
