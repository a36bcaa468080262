package iptables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

var ctx = context.Background()

// withEndpoints returns a copy of st where service port name has the
// given cluster endpoints, and Changed names only that port.
func withEndpoints(st *desired.State, name proxy.ServicePortName, eps ...string) *desired.State {
	next := *st
	next.Services = model.PortMap[*desired.ServicePort]{}
	for n, sp := range st.Services.All() {
		next.Services = next.Services.With(n, sp)
	}
	sp := *st.Service(name)
	var d desired.Dispatch
	for _, e := range eps {
		ap := netip.MustParseAddrPort(e)
		d.Endpoints = append(d.Endpoints, desired.Endpoint{IP: ap.Addr(), Port: ap.Port()})
	}
	sp.Internal, sp.External, sp.Cluster = d, d, d
	next.Services = next.Services.With(name, &sp)
	next.Changed = map[proxy.ServicePortName]struct{}{name: {}}
	return &next
}

func svcName(ns, name string) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: ns, Name: name}, Port: "p80", Protocol: proxy.TCP}
}

// TestPartialSyncRewritesOnlyChangedChains: after one endpoint change only
// that service's own chains appear in the restore input (the top-level
// chains and the filter table do not change, so they are left out), and
// the old endpoint chain is deleted.
func TestPartialSyncRewritesOnlyChangedChains(t *testing.T) {
	st := upstreamState()
	fake, p := syncFake(t, st, Options{})
	before := fake.Dump()

	next := withEndpoints(st, svcName("ns4", "svc4"), "10.180.0.4:80", "10.180.0.6:80")
	if err := p.Sync(ctx, next, proxytest.ModeOf(next)); err != nil {
		t.Fatal(err)
	}
	if p.last.full {
		t.Fatal("sync with one change was full")
	}
	input := string(fake.Restores[len(fake.Restores)-1])
	var chains []string
	for _, line := range strings.Split(sectionOf(input, "nat"), "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok {
			chains = append(chains, strings.Fields(name)[0])
		}
	}
	svc4 := namesOf(svcName("ns4", "svc4"))
	// Each chain comes before those that jump to it; the chain to delete
	// is flushed last.
	want := []string{svc4.sepChain("10.180.0.4:80"), svc4.sepChain("10.180.0.6:80"), svc4.svc, svc4.ext,
		svc4.sepChain("10.180.0.5:80")}
	if strings.Join(chains, " ") != strings.Join(want, " ") {
		t.Errorf("nat chains written:\n got %v\nwant %v", chains, want)
	}
	if !strings.Contains(input, "-X "+svc4.sepChain("10.180.0.5:80")+"\n") {
		t.Error("stale endpoint chain not deleted")
	}
	if strings.Contains(input, "*filter") || strings.Contains(input, "-A "+chainServices+" ") {
		t.Errorf("unchanged top-level rules rewritten:\n%s", input)
	}
	if fake.SaveCalls[kiptables.TableNAT] != 1 {
		t.Errorf("iptables-save ran %d times; a partial sync must not run it", fake.SaveCalls[kiptables.TableNAT])
	}
	// The result equals a fresh full sync of the new state.
	fresh, _ := syncFake(t, next, Options{})
	if got, want := fake.Dump(), fresh.Dump(); got != want {
		t.Errorf("after partial sync:\n%s", proxytest.LineDiff(want, got))
	}
	if fake.Dump() == before {
		t.Error("partial sync changed nothing")
	}
}

// TestPartialSyncRemovesService: a removed service's chains are deleted.
func TestPartialSyncRemovesService(t *testing.T) {
	st := upstreamState()
	fake, p := syncFake(t, st, Options{})
	name := svcName("ns4", "svc4")
	next := *st
	next.Services = model.PortMap[*desired.ServicePort]{}
	for n, sp := range st.Services.All() {
		if n != name {
			next.Services = next.Services.With(n, sp)
		}
	}
	next.Changed = map[proxy.ServicePortName]struct{}{name: {}}
	if err := p.Sync(ctx, &next, proxytest.ModeOf(&next)); err != nil {
		t.Fatal(err)
	}
	if dump := fake.Dump(); strings.Contains(dump, namesOf(name).svc) || strings.Contains(dump, "ns4/svc4") {
		t.Errorf("ns4/svc4 left behind:\n%s", dump)
	}
	// Its nat top-level rules went away, so those chains were rewritten;
	// it had no filter rules, so the filter table was not.
	input := string(fake.Restores[len(fake.Restores)-1])
	if sectionOf(input, "filter") != "" || !strings.Contains(sectionOf(input, "nat"), ":"+chainServices+" ") {
		t.Errorf("tables written:\n%s", input)
	}
}

// TestRefusedBeforeCommitKeepsRecord: a partial restore the tool refused
// before committing anything reports proxy.ErrNotApplied and keeps the
// Proxier's record: the next partial sync, from the State before the
// refused one, is accepted without reading the kernel back, and leaves the
// tables as a fresh full sync of that State would: the port the refused
// sync removed is rendered again, from the new State, which has it.
func TestRefusedBeforeCommitKeepsRecord(t *testing.T) {
	st := upstreamState()
	fake, p := syncFake(t, st, Options{})
	saves := fake.SaveCalls[kiptables.TableNAT]
	fake.RestoreHook = func([]byte) error {
		return fmt.Errorf("%w: line 3 failed", kiptables.ErrNothingCommitted)
	}
	gone := svcName("ns4", "svc4")
	refused := *st
	refused.Services = st.Services.Without(gone)
	refused.Changed = map[proxy.ServicePortName]struct{}{gone: {}}
	if err := p.Sync(ctx, &refused, proxy.PartialSync); !errors.Is(err, proxy.ErrNotApplied) {
		t.Fatalf("refused partial sync: %v, want proxy.ErrNotApplied", err)
	}
	fake.RestoreHook = nil
	next := withEndpoints(st, svcName("ns1", "svc1"), "10.180.0.1:80")
	if err := p.Sync(ctx, next, proxy.PartialSync); err != nil {
		t.Fatalf("partial sync after a refusal that applied nothing: %v", err)
	}
	if n := fake.SaveCalls[kiptables.TableNAT] - saves; n != 0 {
		t.Errorf("iptables-save ran %d times after the refusal", n)
	}
	fresh, _ := syncFake(t, next, Options{})
	if got, want := fake.Dump(), fresh.Dump(); got != want {
		t.Errorf("after the refusal and a partial sync:\n%s", proxytest.LineDiff(want, got))
	}
}

// TestFailureThenRecoverySync: a failed partial restore counts as a partial
// failure and drops the Proxier's record, so it refuses a partial sync; the
// recovery sync the syncer sends after a failure is full.
func TestFailureThenRecoverySync(t *testing.T) {
	st := upstreamState()
	fake, p := syncFake(t, st, Options{})
	fake.RestoreHook = func([]byte) error { return errors.New("injected failure") }
	next := withEndpoints(st, svcName("ns4", "svc4"), "10.180.0.4:80")
	if err := p.Sync(ctx, next, proxytest.ModeOf(next)); err == nil {
		t.Fatal("Sync succeeded despite the failing restore")
	}
	fake.RestoreHook = nil
	again := withEndpoints(next, svcName("ns1", "svc1"), "10.180.0.1:80")
	if err := p.Sync(ctx, again, proxy.PartialSync); !errors.Is(err, proxy.ErrFullSyncNeeded) {
		t.Fatalf("partial sync after a failure: %v, want proxy.ErrFullSyncNeeded", err)
	}
	if err := p.Sync(ctx, again, proxy.RecoverySync); err != nil {
		t.Fatal(err)
	}
	if !p.last.full {
		t.Error("sync after a failure was partial")
	}
	fresh, _ := syncFake(t, again, Options{})
	if fake.Dump() != fresh.Dump() {
		t.Errorf("state after recovery:\n%s", proxytest.LineDiff(fresh.Dump(), fake.Dump()))
	}
}

// TestRestartWithSameStateChangesNothing: a new Proxier (a restarted
// daemon) writing the same State leaves every table as it was.
func TestRestartWithSameStateChangesNothing(t *testing.T) {
	st := upstreamState()
	fake, _ := syncFake(t, st, Options{})
	before := fake.Dump()
	p2 := NewWithInterface(proxy.IPv4, fake, Options{})
	if err := p2.Sync(ctx, st, proxytest.ModeOf(st)); err != nil {
		t.Fatal(err)
	}
	if after := fake.Dump(); after != before {
		t.Errorf("restart changed the tables:\n%s", proxytest.LineDiff(before, after))
	}
}

// TestStartSweepsLeftovers: chains of a service that vanished while we
// were down are found with iptables-save and deleted by the first sync.
func TestStartSweepsLeftovers(t *testing.T) {
	fake, _ := syncFake(t, upstreamState(), Options{})
	st := upstreamState()
	st.Services = st.Services.Without(svcName("ns4", "svc4"))
	p2 := NewWithInterface(proxy.IPv4, fake, Options{})
	if err := p2.Sync(ctx, st, proxytest.ModeOf(st)); err != nil {
		t.Fatal(err)
	}
	if dump := fake.Dump(); strings.Contains(dump, "ns4/svc4") {
		t.Errorf("leftover chains kept:\n%s", dump)
	}
}

// TestCanaryLossThenRecoverySync: a flushed table is noticed, and the
// recovery sync the syncer answers with (its State has a Changed set) is
// full and restores jumps and canaries.
func TestCanaryLossThenRecoverySync(t *testing.T) {
	st := upstreamState()
	fake, p := syncFake(t, st, Options{})
	if missing, err := p.CanaryMissing(ctx); err != nil || missing {
		t.Fatalf("CanaryMissing on intact tables = %t, %v", missing, err)
	}
	before := fake.Dump()
	fake.DeleteChain(kiptables.TableMangle, chainCanary)
	if missing, err := p.CanaryMissing(ctx); err != nil || !missing {
		t.Fatalf("CanaryMissing after deletion = %t, %v", missing, err)
	}
	next := withEndpoints(st, svcName("ns1", "svc1"), "10.180.0.1:80")
	if err := p.Sync(ctx, next, proxy.RecoverySync); err != nil {
		t.Fatal(err)
	}
	if !p.last.full {
		t.Error("recovery sync after canary loss was partial")
	}
	if fake.Dump() != before {
		t.Errorf("tables not restored:\n%s", proxytest.LineDiff(before, fake.Dump()))
	}
}

// TestJumpRules checks the rules at the front of the built-in chains, in
// the order a node that ran kube-proxy has them.
func TestJumpRules(t *testing.T) {
	fake, _ := syncFake(t, upstreamState(), Options{})
	want := map[string][]string{
		"filter INPUT": {"-j KUBE-FIREWALL",
			`-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`,
			`-m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS`,
			`-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`},
		"filter FORWARD": {`-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`,
			`-m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD`,
			`-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
			`-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`},
		"filter OUTPUT": {"-j KUBE-FIREWALL",
			`-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`,
			`-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
		"nat PREROUTING":  {`-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
		"nat OUTPUT":      {`-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
		"nat POSTROUTING": {`-m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`},
	}
	for key, rules := range want {
		table, chain, _ := strings.Cut(key, " ")
		got := fake.Table(kiptables.Table(table)).Chains[chain].Rules
		if strings.Join(got, "\n") != strings.Join(rules, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", key, got, rules)
		}
	}
}

// TestCleanup removes everything but kubelet's KUBE-FIREWALL, and leaves
// other software's rules alone.
func TestCleanup(t *testing.T) {
	fake, p := syncFake(t, upstreamState(), Options{})
	other := []string{"-s", "1.2.3.4", "-j", "DROP"}
	if err := fake.EnsureRuleAtFront(ctx, kiptables.TableFilter, kiptables.ChainInput, other...); err != nil {
		t.Fatal(err)
	}
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	want := `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
-A INPUT -s 1.2.3.4 -j DROP
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
COMMIT
`
	if got := fake.Dump(); got != want {
		t.Errorf("after cleanup:\n%s", proxytest.LineDiff(want, got))
	}
	// Cleaning a clean host is not an error.
	if err := p.Cleanup(ctx); err != nil {
		t.Errorf("second cleanup: %v", err)
	}
}

// TestLargeClusterMode drops per-endpoint comments above 1000 endpoints.
func TestLargeClusterMode(t *testing.T) {
	st := upstreamState()
	name := svcName("ns4", "svc4")
	var eps []string
	for i := range 1001 {
		eps = append(eps, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 181, byte(i / 250), byte(1 + i%250)}), 80).String())
	}
	big := withEndpoints(st, name, eps...)
	big.Changed = nil
	fake, p := syncFake(t, big, Options{})
	if !p.cfg.largeCluster {
		t.Fatal("large-cluster mode not entered at 1001 endpoints")
	}
	svc := fake.Table(kiptables.TableNAT).Chains[namesOf(name).svc].Rules
	if len(svc) != 1002 || strings.Contains(svc[1], "comment") || !strings.Contains(svc[0], "comment") {
		t.Errorf("SVC chain in large-cluster mode: %d rules, first two %q", len(svc), svc[:2])
	}
	small, sp := syncFake(t, st, Options{})
	if !strings.Contains(small.Dump(), `--comment "ns4/svc4:p80 -> 10.180.0.4:80"`) {
		t.Error("small cluster lost its endpoint comments")
	}

	// Crossing the threshold changes every endpoint chain's text: the
	// Proxier refuses a partial sync, and the syncer redoes it fully.
	grown := withEndpoints(st, name, eps...)
	before := len(small.Restores)
	if err := sp.Sync(ctx, grown, proxy.PartialSync); !errors.Is(err, proxy.ErrFullSyncNeeded) {
		t.Fatalf("partial sync into large-cluster mode: %v, want proxy.ErrFullSyncNeeded", err)
	}
	if len(small.Restores) != before {
		t.Error("the refused partial sync ran iptables-restore")
	}
	if err := sp.Sync(ctx, grown, proxy.FullSync); err != nil || !sp.cfg.largeCluster {
		t.Fatalf("full sync into large-cluster mode: %v (large=%t)", err, sp.cfg.largeCluster)
	}
}

// TestPartialSyncRewritesChangedTopLevel: when a change alters the filter
// or nat top-level rules (here: a service loses its endpoints, so it gets
// REJECTs and loses its jumps), those are rewritten whole, and the result
// equals a fresh full sync.
func TestPartialSyncRewritesChangedTopLevel(t *testing.T) {
	st := upstreamState()
	fake, p := syncFake(t, st, Options{})
	next := withEndpoints(st, svcName("ns4", "svc4"))
	if err := p.Sync(ctx, next, proxytest.ModeOf(next)); err != nil {
		t.Fatal(err)
	}
	input := string(fake.Restores[len(fake.Restores)-1])
	if p.last.full || !strings.Contains(sectionOf(input, "filter"), "REJECT") || !strings.Contains(sectionOf(input, "nat"), ":"+chainServices+" ") {
		t.Errorf("full=%t; restore input:\n%s", p.last.full, input)
	}
	fresh, _ := syncFake(t, next, Options{})
	if got, want := fake.Dump(), fresh.Dump(); got != want {
		t.Errorf("after partial sync:\n%s", proxytest.LineDiff(want, got))
	}
}

// TestFullSyncRemovesService: a recovery sync deletes the chains of a
// port that went away and a leftover chain this process never wrote, both
// found by reading nat's chains back.
func TestFullSyncRemovesService(t *testing.T) {
	st := upstreamState()
	fake, p := syncFake(t, st, Options{})
	name := svcName("ns4", "svc4")
	if err := fake.Restore(ctx, []byte("*nat\n:KUBE-SEP-LEFTOVER0000000 - [0:0]\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	next := *st
	next.Services = model.PortMap[*desired.ServicePort]{}
	for n, sp := range st.Services.All() {
		if n != name {
			next.Services = next.Services.With(n, sp)
		}
	}
	next.Changed = nil
	if err := p.Sync(ctx, &next, proxy.RecoverySync); err != nil {
		t.Fatal(err)
	}
	fresh, _ := syncFake(t, &next, Options{})
	if got, want := fake.Dump(), fresh.Dump(); got != want {
		t.Errorf("after the full sync:\n%s", proxytest.LineDiff(want, got))
	}
}

// TestOnlyRecoveryReadsChainsBack: the chain names are read back by a
// recovery sync alone; a full sync that is not one diffs against what
// this process committed, and so still deletes the chains of a port that
// went away, while a leftover someone else added waits for a recovery.
func TestOnlyRecoveryReadsChainsBack(t *testing.T) {
	st := upstreamState()
	fake, p := syncToolFake(t, st)
	if fake.count("ChainNames") != 1 {
		t.Fatalf("first sync listed nat %d times, want 1", fake.count("ChainNames"))
	}
	const leftover = "KUBE-SEP-LEFTOVER0000000"
	if err := fake.Restore(ctx, []byte("*nat\n:"+leftover+" - [0:0]\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	next := *st
	next.Services = st.Services.Without(svcName("ns4", "svc4"))
	next.Changed = nil
	if err := p.Sync(ctx, &next, proxy.FullSync); err != nil {
		t.Fatal(err)
	}
	dump := fake.Dump()
	if fake.count("ChainNames") != 1 || strings.Contains(dump, "ns4/svc4") || !strings.Contains(dump, leftover) {
		t.Errorf("full sync: %d listings (want 1), ns4/svc4 gone %t (want true), leftover kept %t (want true)",
			fake.count("ChainNames"), !strings.Contains(dump, "ns4/svc4"), strings.Contains(dump, leftover))
	}
	if err := p.Sync(ctx, &next, proxy.RecoverySync); err != nil {
		t.Fatal(err)
	}
	if fake.count("ChainNames") != 2 || strings.Contains(fake.Dump(), leftover) {
		t.Errorf("recovery sync: %d listings (want 2), leftover kept %t (want false)", fake.count("ChainNames"), strings.Contains(fake.Dump(), leftover))
	}
}
