package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// countsState is two service ports whose endpoint counts tests change: web
// (eTP Cluster: cluster IP, external IP, node port; n remote endpoints) and
// local (eTP Local: n local endpoints for external clients, those plus one
// remote endpoint for the cluster-wide choice).
func countsState(n int) *desired.State {
	w := proxytest.WorldOf(proxy.IPv4)
	st := emptyState()
	eps := func(addr func(int) netip.Addr, count int) []desired.Endpoint {
		var out []desired.Endpoint
		for i := 1; i <= count; i++ {
			out = append(out, desired.Endpoint{IP: addr(i), Port: 8080})
		}
		slices.SortFunc(out, func(a, b desired.Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) })
		return out
	}
	remote := desired.Dispatch{Endpoints: eps(w.RemotePod, n)}
	st.Services = st.Services.With(countsName("web"), &desired.ServicePort{Name: countsName("web"), Protocol: proxy.TCP, Port: 80,
		ClusterIP: w.ClusterIP(1), NodePort: 30001, ExternalIPs: []netip.Addr{w.ExternalIP(1)},
		Internal: remote, External: remote, Cluster: remote})
	local := desired.Dispatch{Endpoints: eps(w.LocalPod, n)}
	cluster := desired.Dispatch{Endpoints: append(slices.Clone(local.Endpoints), desired.Endpoint{IP: w.RemotePod(200), Port: 8080})}
	st.Services = st.Services.With(countsName("local"), &desired.ServicePort{Name: countsName("local"), Protocol: proxy.TCP, Port: 80,
		ClusterIP: w.ClusterIP(2), NodePort: 30002, ExternalIPs: []netip.Addr{w.ExternalIP(2)},
		Internal: cluster, External: local, Cluster: cluster, ExternalLocal: true})
	return st
}

// emptyState is an IPv4 State without services: node ports on every
// address, the cluster CIDR as the local-traffic detector.
func emptyState() *desired.State {
	w := proxytest.WorldOf(proxy.IPv4)
	return &desired.State{
		Family:    proxy.IPv4,
		NodeIPs:   []netip.Addr{w.NodeIP},
		NodePorts: desired.NodePortAddrs{All: true},
		Masquerade: desired.Masquerade{Mark: 1 << 14,
			Local: desired.LocalDetector{Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{w.ClusterCIDR}}},
		Services: model.PortMap[*desired.ServicePort]{},
	}
}

func countsName(name string) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: name}, Port: "http", Protocol: proxy.TCP}
}

// countsFlows reach every frontend of countsState, from outside and, for
// the eTP=Local service, from a local pod (the cluster-wide short-circuit).
func countsFlows() []proxytest.Flow {
	w := proxytest.WorldOf(proxy.IPv4)
	var flows []proxytest.Flow
	for i := 1; i <= 2; i++ {
		for _, dst := range []netip.AddrPort{
			netip.AddrPortFrom(w.ClusterIP(i), 80),
			netip.AddrPortFrom(w.ExternalIP(i), 80),
			netip.AddrPortFrom(w.NodeIP, uint16(30000+i)),
		} {
			for _, src := range []netip.Addr{w.ExternalClient, w.LocalPod(250)} {
				flows = append(flows, proxytest.Flow{Source: src, Protocol: proxy.TCP, Dest: dst.Addr(), DestPort: dst.Port()})
			}
		}
	}
	return flows
}

func withCounts(prev *desired.State, n int) *desired.State {
	next := countsState(n)
	next.Changed = map[proxy.ServicePortName]struct{}{}
	for name := range next.Services.All() {
		next.Changed[name] = struct{}{}
	}
	return next
}

// TestEndpointCountChanges moves both services through endpoint counts
// that appear for the first time after the first sync (the case nft 1.0.6
// refused when endpoint maps were shared), one unit per transaction, and
// checks after every transaction that each frontend leads to exactly its
// old or its new endpoints (never to a chain whose map lacks them), and
// after each sync that the table is what a fresh sync would program.
func TestEndpointCountChanges(t *testing.T) {
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	prev := countsState(2)
	mustSync(t, p, prev)
	p.maxOps = 1
	for _, n := range []int{3, 5, 1, 3, 2} {
		next := withCounts(prev, n)
		fake.afterRun = func() {
			for _, flow := range countsFlows() {
				got := newTracer(t, fake, next).trace(flow)
				before, after := proxytest.Evaluate(prev, flow), proxytest.Evaluate(next, flow)
				if !slices.Equal(got.Endpoints, before.Endpoints) && !slices.Equal(got.Endpoints, after.Endpoints) || got.Verdict != proxytest.DNAT {
					t.Fatalf("%d endpoints, mid-sync after:\n%s\n%v reached %s; want %v or %v", n, fake.LastTransaction, flow, got, before.Endpoints, after.Endpoints)
				}
			}
		}
		mustSync(t, p, next)
		fake.afterRun = nil
		for _, flow := range countsFlows() {
			if got, want := newTracer(t, fake, next).trace(flow), proxytest.Evaluate(next, flow); !got.Equal(want) {
				t.Errorf("%d endpoints: %v reached %s, want %s", n, flow, got, want)
			}
		}
		ref := newStrictFake(knftables.IPv4Family)
		mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(ref)), countsState(n))
		if got, want := sortedDump(fake), sortedDump(ref); got != want {
			t.Errorf("%d endpoints: table differs from a fresh sync:\n%s", n, lineDiff(want, got))
		}
		prev = next
	}
}

// TestReplacedEndpointKeepsSlots: replacing one endpoint by one that sorts
// elsewhere rewrites one element per frontend (and the hairpin element),
// not every slot after it; a restart reads the slots back and rewrites
// nothing.
// 20 endpoints take the map-based lookups of assignSlots, 5 the scans.
func TestReplacedEndpointKeepsSlots(t *testing.T) {
	for _, n := range []int{5, 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testReplacedEndpointKeepsSlots(t, n) })
	}
}

func testReplacedEndpointKeepsSlots(t *testing.T, n int) {
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	st := countsState(n)
	mustSync(t, p, st)
	name := countsName("web")
	next := withChange(st, name, func(sp *desired.ServicePort) {
		eps := slices.Clone(sp.Internal.Endpoints)
		eps[0].IP = proxytest.WorldOf(proxy.IPv4).RemotePod(100) // sorts last
		slices.SortFunc(eps, func(a, b desired.Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) })
		d := desired.Dispatch{Endpoints: eps}
		sp.Internal, sp.External, sp.Cluster = d, d, d
	})
	// 3 frontends × (delete + add) + hairpin (delete + add).
	if s := mustSync(t, p, next); s.Operations > 8 {
		t.Errorf("replacing one endpoint sent %d operations, want ≤ 8:\n%s", s.Operations, fake.LastTransaction)
	}
	for _, flow := range countsFlows() {
		if got, want := newTracer(t, fake, next).trace(flow), proxytest.Evaluate(next, flow); !got.Equal(want) {
			t.Errorf("%v reached %s, want %s", flow, got, want)
		}
	}
	full := *next
	full.Changed = nil
	if s := mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(fake)), &full); s.Operations != 0 {
		t.Errorf("restart after a slot-preserving change sent %d operations:\n%s", s.Operations, fake.LastTransaction)
	}
}

// TestRepairRecreatesEndpointMap: a dispatch chain emptied behind the
// Proxier's back cannot get its rule back while its map exists (nft 1.0.6),
// so the repair deletes and re-adds the map, with every element, in the
// rule's transaction.
func TestRepairRecreatesEndpointMap(t *testing.T) {
	st := countsState(3)
	fake := newStrictFake(knftables.IPv4Family)
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(fake)), st)
	want := sortedDump(fake)
	// The service's shard decides the names: "internal-3-sK".
	var chain string
	for name := range fake.Table.Chains {
		if strings.HasPrefix(name, "internal-3-s") {
			chain = name
		}
	}
	if chain == "" {
		t.Fatalf("no internal-3-s* chain:\n%s", want)
	}
	tx := fake.NewTransaction()
	tx.Flush(&knftables.Chain{Name: chain})
	mapName := strings.Replace(chain, "internal-", "internal-endpoints-", 1)
	m := fake.Table.Maps[mapName]
	tx.Delete(&knftables.Element{Map: m.Name, Key: m.Elements[0].Key})
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	full := *st
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(fake)), &full)
	if got := sortedDump(fake); got != want {
		t.Errorf("repaired table differs:\n%s", lineDiff(want, got))
	}
	if !strings.Contains(fake.LastTransaction.String(), "delete map ip kube-proxy "+mapName) {
		t.Errorf("repair did not re-create the map:\n%s", fake.LastTransaction)
	}
}

// TestDetectorChangeRewritesDispatchChains: a new local-traffic detector
// changes the internal chains' rules; their maps are re-created with them.
func TestDetectorChangeRewritesDispatchChains(t *testing.T) {
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, countsState(3))
	next := countsState(3)
	next.Masquerade.Local = desired.LocalDetector{Mode: desired.LocalInterfacePrefix, Interface: "veth"}
	next.Changed = map[proxy.ServicePortName]struct{}{}
	// A new detector is global: the syncer makes the sync full.
	mustSyncIn(t, p, next, proxy.FullSync)
	ref := newStrictFake(knftables.IPv4Family)
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(ref)), next)
	if got, want := sortedDump(fake), sortedDump(ref); got != want {
		t.Errorf("table differs from a fresh sync:\n%s", lineDiff(want, got))
	}
}

// lineDiff lists the lines of sorted dumps only in want (-) or got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestUpgradeFromSharedEndpointMaps starts from a table of the layout
// before per-chain endpoint maps (five maps shared by every dispatch
// chain) and syncs one unit per transaction: a rewritten dispatch chain
// must get its new map complete in the same transaction, since frontends
// already point at it, so every flow keeps reaching its endpoints.
func TestUpgradeFromSharedEndpointMaps(t *testing.T) {
	old, err := os.ReadFile("testdata/upgrade-from-shared-endpoint-maps-ipv4.dump")
	if err != nil {
		t.Fatal(err)
	}
	fake := newStrictFake(knftables.IPv4Family)
	if err := fake.ParseDump(string(old)); err != nil {
		t.Fatal(err)
	}
	st := caseState(t, "externalTrafficPolicy Local with a local endpoint", proxy.IPv4)
	var flows []proxytest.Flow
	for _, sp := range st.Services.All() {
		for _, dst := range append([]netip.Addr{sp.ClusterIP}, sp.LoadBalancerIPs...) {
			for _, src := range []netip.Addr{proxytest.WorldOf(proxy.IPv4).ExternalClient, proxytest.WorldOf(proxy.IPv4).LocalPod(9)} {
				flows = append(flows, proxytest.Flow{Source: src, Protocol: sp.Protocol, Dest: dst, DestPort: sp.Port})
			}
		}
	}
	check := func(when string) {
		for _, flow := range flows {
			if got, want := newTracer(t, fake, st).trace(flow), proxytest.Evaluate(st, flow); !got.Equal(want) {
				t.Fatalf("%s: %v reached %s, want %s\n%s", when, flow, got, want, fake.LastTransaction)
			}
		}
	}
	check("old layout")
	fake.afterRun = func() { check("mid-upgrade") }
	syncUnitByUnit(t, fake, st)
}

// Conflicting claims on a map element resolve to the first owner in name
// order whichever claimed first, and the next takes over as they go.
func TestSharedElementClaims(t *testing.T) {
	s := newStore()
	a, b, c := countsName("a"), countsName("b"), countsName("c")
	partOf := func(v string) *part {
		p := &part{}
		p.addElem(mapServiceIPs, "10.0.0.1 . tcp . 80", v)
		return p
	}
	want := func(wantV string, wantOK bool) {
		t.Helper()
		if v, ok := s.want(s.elemKeyOf(mapServiceIPs, "10.0.0.1 . tcp . 80", false)); v != wantV || ok != wantOK {
			t.Errorf("desired value %q %v, want %q %v", v, ok, wantV, wantOK)
		}
	}
	s.replace(c, partOf("goto c"))
	s.replace(b, partOf("goto b"))
	s.replace(a, partOf("goto a"))
	want("goto a", true)
	s.replace(a, nil)
	want("goto b", true)
	s.replace(c, nil)
	want("goto b", true)
	s.replace(b, nil)
	want("", false)
}

// Claims without a value (set elements: an endpoint address in several
// services' hairpin sets) are counted: the element stays desired until
// its last claim goes, and a part that claims it twice releases it twice.
func TestCountedElementClaims(t *testing.T) {
	s := newStore()
	a, b := countsName("a"), countsName("b")
	const set, key = "hairpin-endpoints-s0", "10.0.0.1 . 10.0.0.1"
	partOf := func(claims int) *part {
		p := &part{}
		for range claims {
			p.addElem(set, key, "")
		}
		return p
	}
	want := func(wantOK bool) {
		t.Helper()
		if v, ok := s.want(s.elemKeyOf(set, key, false)); v != "" || ok != wantOK {
			t.Errorf("desired value %q %v, want \"\" %v", v, ok, wantOK)
		}
	}
	s.replace(a, partOf(1))
	s.replace(b, partOf(2))
	want(true)
	s.replace(b, nil)
	want(true)
	s.replace(b, partOf(1))
	s.replace(a, nil)
	want(true)
	s.replace(b, nil)
	want(false)
}
