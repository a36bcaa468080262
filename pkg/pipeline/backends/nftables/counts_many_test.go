package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// wideState is one service port with e external IPs (and a node port) and
// n remote endpoints; with local, eTP=Local with n/2 local endpoints for
// external clients.
func wideState(e, n int, local bool) *desired.State {
	w := proxytest.WorldOf(proxy.IPv4)
	st := emptyState()
	var eps, locals []desired.Endpoint
	for i := 1; i <= n; i++ {
		eps = append(eps, desired.Endpoint{IP: w.RemotePod(i), Port: 8080})
		if i <= n/2 {
			locals = append(locals, desired.Endpoint{IP: w.LocalPod(i), Port: 8080})
		}
	}
	name := countsName("wide")
	sp := &desired.ServicePort{Name: name, Protocol: proxy.TCP, Port: 80, ClusterIP: w.ClusterIP(1), NodePort: 30001,
		ExternalIPs: wideExternalIPs(e), Internal: desired.Dispatch{Endpoints: eps},
		External: desired.Dispatch{Endpoints: eps}, Cluster: desired.Dispatch{Endpoints: eps}}
	if local {
		sp.Cluster.Endpoints = slices.Concat(locals, eps)
		sp.Internal = sp.Cluster
		sp.External, sp.ExternalLocal = desired.Dispatch{Endpoints: locals}, true
	}
	st.Services = st.Services.With(name, sp)
	return st
}

// wideExternalIPs are e addresses in 198.18.0.0/15.
func wideExternalIPs(e int) []netip.Addr {
	out := make([]netip.Addr, e)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
	}
	return out
}

// tableElements counts the elements of every set and map of the table, and
// the items of the inline maps in its rules (the kernel holds those as an
// anonymous map's elements).
func tableElements(fake *strictFake) int {
	n := 0
	for _, s := range fake.Table.Sets {
		n += len(s.Elements)
	}
	for _, m := range fake.Table.Maps {
		n += len(m.Elements)
	}
	for _, c := range fake.Table.Chains {
		for _, r := range c.Rules {
			if strings.Contains(r.Rule, " map { ") {
				n += strings.Count(r.Rule, " : ")
			}
		}
	}
	return n
}

// TestManyExternalIPsCostEPlusN: 1,000 external IPs × 100 endpoints must
// not cost E×N (100k) elements, nor an endpoint-count change E×N element
// moves: a tenant could otherwise make every node hold and rewrite 100k
// elements. The flows through the first, a middle and the last external
// IP, and a restart that sends nothing, check the shape works.
func TestManyExternalIPsCostEPlusN(t *testing.T) {
	const e, n = 1000, 100
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("eTP-local=%v", local), func(t *testing.T) {
			st := wideState(e, n, local)
			// E frontends; cluster IP, node port and hairpin elements
			// and the inline maps, N or so each (eTP=Local: cluster N +
			// N/2, local N/2).
			const limit = e + 8*n
			// The rendered part first: syncing E×N elements into the
			// fake would take minutes.
			if got := len(renderService(newConfig(st), st.Service(countsName("wide"))).elems); got > limit {
				t.Fatalf("%d external IPs × %d endpoints render %d elements, want ≤ %d (E+N, not E×N)", e, n, got, limit)
			}
			fake := newStrictFake(knftables.IPv4Family)
			p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
			mustSync(t, p, st)
			got := tableElements(fake)
			t.Logf("%d external IPs × %d endpoints: %d elements, %d chains", e, n, got, len(fake.Table.Chains))
			if got > limit {
				t.Errorf("%d external IPs × %d endpoints: %d elements, want ≤ %d (E+N, not E×N)", e, n, got, limit)
			}
			checkWideFlows(t, fake, st)
			next := withChange(st, countsName("wide"), func(sp *desired.ServicePort) {
				shrunk := *wideState(e, n-1, local).Service(countsName("wide"))
				*sp = shrunk
			})
			s := mustSync(t, p, next)
			t.Logf("one endpoint fewer: %d operations", s.Operations)
			if s.Operations > limit {
				t.Errorf("one endpoint fewer: %d operations, want ≤ %d (E+N, not E×N)", s.Operations, limit)
			}
			checkWideFlows(t, fake, next)
			full := *next
			full.Changed = nil
			if s := mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(fake)), &full); s.Operations != 0 {
				t.Errorf("restart sent %d operations, want none", s.Operations)
			}
		})
	}
}

// checkWideFlows traces flows from an external client and a local pod to
// the first, a middle and the last external IP and the node port.
func checkWideFlows(t *testing.T, fake *strictFake, st *desired.State) {
	t.Helper()
	w := proxytest.WorldOf(proxy.IPv4)
	sp := st.Service(countsName("wide"))
	ext := sp.ExternalIPs
	var flows []proxytest.Flow
	for _, dst := range []netip.AddrPort{netip.AddrPortFrom(ext[0], 80), netip.AddrPortFrom(ext[len(ext)/2], 80),
		netip.AddrPortFrom(ext[len(ext)-1], 80), netip.AddrPortFrom(w.NodeIP, sp.NodePort)} {
		for _, src := range []netip.Addr{w.ExternalClient, w.LocalPod(250)} {
			flows = append(flows, proxytest.Flow{Source: src, Protocol: proxy.TCP, Dest: dst.Addr(), DestPort: dst.Port()})
		}
	}
	for _, flow := range flows {
		got, want := newTracer(t, fake, st).trace(flow), proxytest.Evaluate(st, flow)
		if !got.Equal(want) || got.Verdict != proxytest.DNAT {
			t.Errorf("%v reached %s, want %s", flow, got, want)
		}
	}
}

// TestOwnChainsThreshold moves a service port with 30 external IPs across
// the threshold and back as its endpoint count changes (shared chains
// below (E−1)·N = 256, its own from there), one unit per transaction:
// after every transaction each flow must reach exactly its old or its new
// endpoints, and after each sync the table must be what a fresh sync
// programs.
func TestOwnChainsThreshold(t *testing.T) {
	const e = 30
	for _, tc := range []struct {
		local  bool
		counts []int // endpoints; eTP=Local: N/2 local ones too
	}{{false, []int{5, 10, 8, 12, 3}}, {true, []int{2, 6, 4, 8, 2}}} {
		t.Run(fmt.Sprintf("eTP-local=%v", tc.local), func(t *testing.T) {
			fake := newStrictFake(knftables.IPv4Family)
			p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
			prev := wideState(e, tc.counts[0], tc.local)
			mustSync(t, p, prev)
			p.maxOps = 1
			for _, n := range tc.counts[1:] {
				next := withChange(prev, countsName("wide"), func(sp *desired.ServicePort) {
					*sp = *wideState(e, n, tc.local).Service(countsName("wide"))
				})
				fake.afterRun = func() { midSyncFlows(t, fake, prev, next) }
				mustSync(t, p, next)
				fake.afterRun = nil
				checkWideFlows(t, fake, next)
				if got, want := ownsChains(fake), ownsWide(next); got != want {
					t.Errorf("%d endpoints: chains of its own %v, want %v", n, got, want)
				}
				ref := newStrictFake(knftables.IPv4Family)
				mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(ref)), wideState(e, n, tc.local))
				if got, want := sortedDump(fake), sortedDump(ref); got != want {
					t.Errorf("%d endpoints: table differs from a fresh sync:\n%s", n, lineDiff(want, got))
				}
				prev = next
			}
		})
	}
}

// ownsWide tells whether the wide service port should have chains of its
// own: (E−1)·N ≥ defaultOwnSlots.
func ownsWide(st *desired.State) bool {
	sp := st.Service(countsName("wide"))
	n := len(sp.External.Endpoints)
	if sp.ExternalLocal {
		n += len(sp.Cluster.Endpoints)
	}
	return (len(sp.ExternalIPs)-1)*n >= defaultOwnSlots
}

// ownsChains tells whether the table has a service port's own chain (a
// name with a "/", not the layout marker).
func ownsChains(fake *strictFake) bool {
	for name := range fake.Table.Chains {
		if strings.Contains(name, "/") && !isMarker(name) {
			return true
		}
	}
	return false
}

// midSyncFlows checks, between two transactions of a sync from prev to
// next, that flows to the wide service's external IPs reach exactly its
// old or its new endpoints.
func midSyncFlows(t *testing.T, fake *strictFake, prev, next *desired.State) {
	t.Helper()
	w := proxytest.WorldOf(proxy.IPv4)
	for _, dst := range wideExternalIPs(3) {
		for _, src := range []netip.Addr{w.ExternalClient, w.LocalPod(250)} {
			flow := proxytest.Flow{Source: src, Protocol: proxy.TCP, Dest: dst, DestPort: 80}
			got := newTracer(t, fake, next).trace(flow)
			before, after := proxytest.Evaluate(prev, flow), proxytest.Evaluate(next, flow)
			if !got.Equal(before) && !got.Equal(after) {
				t.Fatalf("mid-sync after:\n%s\n%v reached %s; want %s or %s", fake.LastTransaction, flow, got, before, after)
			}
		}
	}
}

// TestManyExternalIPsInKernel programs the 1,000 external IPs × 100
// endpoints service, at the default threshold, into a real kernel: the
// 100-item inline map must be accepted, a restart must send nothing, and
// one endpoint fewer must stay O(E+N), then read back unchanged again.
func TestManyExternalIPsInKernel(t *testing.T) {
	requireRoot(t)
	ns, err := netnstest.New(t).NewNS("wide")
	if err != nil {
		t.Fatal(err)
	}
	const e, n = 1000, 100
	for _, local := range []bool{false, true} {
		st := wideState(e, n, local)
		next := withChange(st, countsName("wide"), func(sp *desired.ServicePort) {
			*sp = *wideState(e, n-1, local).Service(countsName("wide"))
		})
		err := ns.Do(func() error {
			p, err := New(proxy.IPv4, Options{})
			if err != nil {
				return err
			}
			defer p.Close()
			defer func() { _ = p.Cleanup(context.Background()) }()
			for _, step := range []struct {
				st   *desired.State
				what string
			}{{st, "cold sync"}, {next, "one endpoint fewer"}} {
				if err := p.Sync(context.Background(), step.st, proxytest.ModeOf(step.st)); err != nil {
					return fmt.Errorf("%s: %w", step.what, err)
				}
				if ops := p.last.Operations; ops > e+8*n {
					return fmt.Errorf("%s: %d operations, want ≤ %d (E+N)", step.what, ops, e+8*n)
				}
				restarted, err := New(proxy.IPv4, Options{})
				if err != nil {
					return err
				}
				defer restarted.Close()
				full := *step.st
				full.Changed = nil
				if err := restarted.Sync(context.Background(), &full, proxytest.ModeOf(&full)); err != nil {
					return fmt.Errorf("restart after %s: %w", step.what, err)
				}
				if ops := restarted.last.Operations; ops != 0 {
					return fmt.Errorf("restart after %s sent %d operations", step.what, ops)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("eTP-local=%v: %v", local, err)
		}
	}
}
