package nodeport

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// mapTracer answers a flow from outside the node from real kernel maps of
// A's family, written by a store with the flow's State: the lookups
// np_ingress makes for a flow's first packet, in Go.
type mapTracer[A addrBytes] struct {
	maps  map[string]*ebpf.Map
	state *desired.State
}

// tracedMaps are the maps the render writes, which the tracer reads.
func tracedMaps(n familyMaps) []string {
	return []string{n.services, n.backends, n.maglev, n.ranges, n.members, n.config, n.tunnels, n.peers}
}

func newMapTracer[A addrBytes](t *testing.T, st *desired.State) *mapTracer[A] {
	t.Helper()
	spec, err := loadNodeport()
	must(t, err)
	mt := &mapTracer[A]{maps: map[string]*ebpf.Map{}, state: st}
	for _, name := range tracedMaps(namesOf[A]()) {
		ms := spec.Maps[name].Copy()
		if ms.Type != ebpf.Array {
			ms.MaxEntries = minEntries
		}
		m, err := ebpf.NewMap(ms)
		must(t, err)
		t.Cleanup(func() { m.Close() })
		mt.maps[name] = m
	}
	want := render[A](st)
	s := newStore[A]()
	s.claim(&want)
	_, err = s.write(tablesOf(mt.maps, &want))
	must(t, err)
	return mt
}

// servedByTC says whether a flow is one the tc programs see first: a
// packet from outside. The node's own and its pods' are the socket hooks',
// translated at connect; so are those of a pod on another node that st
// tells from outside traffic, on that node, whose hooks translate them as
// desired's route from a pod says (a pod's flow to an LB IP of
// externalTrafficPolicy Local takes the cluster set): such a flow never
// reaches this node's programs for the frontend.
func servedByTC(st *desired.State, flow proxytest.Flow) bool {
	if flow.FromPeer {
		return true
	}
	if flow.FromHost || flow.InInterface != "" || proxytest.WorldOf(st.Family).LocalPodCIDR.Contains(flow.Source) {
		return false
	}
	return !slices.ContainsFunc(st.Masquerade.Local.CIDRs, func(p netip.Prefix) bool { return p.Contains(flow.Source) })
}

// trace returns the fate of a new flow's first packet: every endpoint
// np_ingress may pick, or its refusal, or Accept when no frontend takes
// it (it goes to the stack untranslated).
func (mt *mapTracer[A]) trace(t *testing.T, flow proxytest.Flow) proxytest.Result {
	t.Helper()
	proto, ok := protoNumbers[flow.Protocol]
	if !ok {
		return proxytest.Result{Verdict: proxytest.Accept}
	}
	if flow.FromPeer {
		return mt.traceTunnelled(t, flow, proto)
	}
	var v svcVal
	err := mt.maps[namesOf[A]().services].Lookup(frontendKey[A](flow.Dest, flow.DestPort, proto), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return proxytest.Result{Verdict: proxytest.Accept}
	}
	must(t, err)
	if v.Flags&flagRanges != 0 && !mt.allowed(t, v.ID, flow.Source) {
		return proxytest.Result{Verdict: proxytest.Drop}
	}
	if v.Count == 0 {
		if v.Flags&flagDrop != 0 {
			return proxytest.Result{Verdict: proxytest.Drop}
		}
		return proxytest.Result{Verdict: proxytest.Reject}
	}
	outs := []proxytest.Outcome{}
	for _, be := range mt.endpoints(t, v) {
		// A DSR frontend tunnels a flow to an endpoint np_tunnels names,
		// unless the client is that endpoint or inside the cluster
		// (np_ranges under inClusterID). Otherwise the programs
		// masquerade a flow to an endpoint on another node when
		// desired's route says so, and the client's own flow to itself
		// (hairpin) always; a local endpoint's never.
		tunnel := v.Flags&flagDSR != 0 && be.Addr() != flow.Source && mt.hasTunnel(t, be.Addr()) &&
			!mt.allowed(t, inClusterID, flow.Source)
		masq := !tunnel && !mt.local(be.Addr()) && (v.Flags&flagMasq != 0 || be.Addr() == flow.Source)
		outs = append(outs, proxytest.Outcome{Verdict: proxytest.DNAT, Endpoint: be, Masquerade: masq, Tunneled: tunnel})
	}
	return proxytest.CombineOutcomes(outs)
}

// traceTunnelled is trace of a flow a peer tunnelled here, decapsulated:
// np_ingress_tun looks up the frontends of scope 1, the wildcard node port
// only for a peer's address, and serves them with local endpoints alone.
func (mt *mapTracer[A]) traceTunnelled(t *testing.T, flow proxytest.Flow, proto uint8) proxytest.Result {
	t.Helper()
	n := namesOf[A]()
	k := frontendKey[A](flow.Dest, flow.DestPort, proto)
	k.Scope = scopeTunnel
	var v svcVal
	err := mt.maps[n.services].Lookup(k, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) && mt.isPeer(t, flow.Dest) {
		err = mt.maps[n.services].Lookup(svcKeyOf[A]{Port: k.Port, Proto: proto, Scope: scopeTunnel}, &v)
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return proxytest.Result{Verdict: proxytest.Accept}
	}
	must(t, err)
	if v.Count == 0 {
		if v.Flags&flagDrop == 0 {
			t.Errorf("flow %q: the frontends of tunnelled flows refuse without flagDrop", flow.Name)
		}
		return proxytest.Result{Verdict: proxytest.Drop}
	}
	outs := []proxytest.Outcome{}
	for _, be := range mt.endpoints(t, v) {
		outs = append(outs, proxytest.Outcome{Verdict: proxytest.DNAT, Endpoint: be})
	}
	return proxytest.CombineOutcomes(outs)
}

// hasTunnel says whether np_tunnels names addr's node.
func (mt *mapTracer[A]) hasTunnel(t *testing.T, addr netip.Addr) bool {
	return mt.has(t, namesOf[A]().tunnels, addr)
}

// isPeer says whether np_peers holds addr.
func (mt *mapTracer[A]) isPeer(t *testing.T, addr netip.Addr) bool {
	return mt.has(t, namesOf[A]().peers, addr)
}

// has says whether map name holds addr.
func (mt *mapTracer[A]) has(t *testing.T, name string, addr netip.Addr) bool {
	t.Helper()
	err := mt.maps[name].Lookup(addrOf[A](addr), make([]byte, mt.maps[name].ValueSize()))
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false
	}
	must(t, err)
	return true
}

// endpoints are the endpoints of the group of frontend v: its slots, or
// the distinct endpoints of its Maglev table.
func (mt *mapTracer[A]) endpoints(t *testing.T, v svcVal) []netip.AddrPort {
	t.Helper()
	n := namesOf[A]()
	var out []netip.AddrPort
	if v.Flags&flagMaglev != 0 {
		var id ebpf.MapID
		must(t, mt.maps[n.maglev].Lookup(v.ID, &id))
		tab, err := ebpf.NewMapFromID(id)
		must(t, err)
		defer tab.Close()
		must(t, bpfmap.Table[uint32, beValOf[A]]{M: tab}.Each(func(_ uint32, be beValOf[A]) error {
			out = append(out, be.AddrPort())
			return nil
		}))
	} else {
		for s := range v.Count {
			var be beValOf[A]
			must(t, mt.maps[n.backends].Lookup(beKey{ID: v.ID, Slot: s}, &be))
			out = append(out, be.AddrPort())
		}
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return slices.Compact(out)
}

// allowed is the longest-prefix lookup of (group, source) in np_ranges.
func (mt *mapTracer[A]) allowed(t *testing.T, id uint64, src netip.Addr) bool {
	t.Helper()
	var one uint32
	err := mt.maps[namesOf[A]().ranges].Lookup(sourceKey[A](id, netip.PrefixFrom(src, src.BitLen())), &one)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false
	}
	must(t, err)
	return true
}

// local says whether addr is on this node (a pod of its pod range, or an
// address of its own): np_ingress sends its flows up the stack.
func (mt *mapTracer[A]) local(addr netip.Addr) bool {
	return proxytest.WorldOf(mt.state.Family).LocalPodCIDR.Contains(addr) || slices.Contains(proxytest.LocalAddrs(mt.state), addr)
}

// tcDifferences is what the tc programs do otherwise than the flow cases'
// kube-proxy, as the nodeport README documents: cluster IPs and SCTP from
// outside pass untranslated (ebpf mode with the programs has no rules for
// them), and a flow to a local endpoint is never masqueraded (the pod sees
// the client).
func tcDifferences(st *desired.State) func(proxytest.Flow, proxytest.Result) proxytest.Result {
	return func(flow proxytest.Flow, want proxytest.Result) proxytest.Result {
		if _, ok := protoNumbers[flow.Protocol]; !ok || proxytest.WorldOf(st.Family).ServiceCIDR.Contains(flow.Dest) {
			return proxytest.Result{Verdict: proxytest.Accept}
		}
		if want.Verdict == proxytest.DNAT && want.Masquerade {
			remote := slices.ContainsFunc(want.Endpoints, func(ep netip.AddrPort) bool {
				if ep.Addr() == flow.Source {
					return true
				}
				return !slices.Contains(want.Tunneled, ep) && !proxytest.WorldOf(st.Family).LocalPodCIDR.Contains(ep.Addr()) &&
					!slices.Contains(proxytest.LocalAddrs(st), ep.Addr())
			})
			want.Masquerade = remote
		}
		return want
	}
}

// TestFlowsOverRealMaps runs the shared flow cases that reach the node
// from outside the cluster against the maps the render writes for their State,
// through the lookups of np_ingress.
func TestFlowsOverRealMaps(t *testing.T) {
	netnstest.RequireKernel(t)
	traced, skipped := runTCFlows(t, append(proxytest.Cases(), proxytest.DSRCases()...))
	t.Logf("%d flows from outside the cluster traced over real maps; %d left to the socket hooks (the node's own, pods')", traced, skipped)
	if traced == 0 {
		t.Error("no flow traced")
	}
}

// runTCFlows traces cases' flows from outside over real maps, and counts
// the flows traced and those left to the socket hooks.
func runTCFlows(t *testing.T, cases []proxytest.Case) (traced, skipped int) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			for _, family := range proxy.Families {
				var trace func(*testing.T, proxytest.Flow) proxytest.Result
				var st *desired.State
				for _, flow := range c.Flows {
					if !family.Contains(flow.Dest) {
						continue
					}
					if st == nil {
						st = proxytest.BuildState(t, c, family)
					}
					if !servedByTC(st, flow) {
						skipped++
						continue
					}
					if trace == nil {
						if family == proxy.IPv6 {
							trace = newMapTracer[[16]byte](t, st).trace
						} else {
							trace = newMapTracer[[4]byte](t, st).trace
						}
					}
					traced++
					if got := proxytest.MapBack(flow, trace(t, flow), tcDifferences(st)); !got.Equal(flow.Want) {
						t.Errorf("flow %q (%s %s -> %s:%d): got %s, want %s",
							flow.Name, flow.Protocol, flow.Source, flow.Dest, flow.DestPort, got, tcDifferences(st)(flow, flow.Want))
					}
				}
			}
		})
	}
	return traced, skipped
}
