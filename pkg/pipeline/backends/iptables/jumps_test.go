package iptables

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// toolFake is a Fake that is iptables-nft (no listing of the jumps
// doubles as nat's read-back) and records each call that runs a tool, a
// full sync's restore (RestoreFrom) aside.
type toolFake struct {
	*kiptables.Fake
	calls []string
}

func (f *toolFake) Flavour() kiptables.Flavour { return kiptables.FlavourNFT }

func (f *toolFake) record(call string, table kiptables.Table, what string) {
	f.calls = append(f.calls, call+" "+string(table)+" "+what)
}

// syncToolFake programs state into a fresh toolFake with a recovery
// sync, as syncFake does into a Fake.
func syncToolFake(t *testing.T, st *desired.State) (*toolFake, *Proxier) {
	t.Helper()
	fake := &toolFake{Fake: kiptables.NewFake()}
	p := NewWithInterface(st.Family, fake, Options{})
	if err := p.Sync(ctx, st, proxy.RecoverySync); err != nil {
		t.Fatal(err)
	}
	return fake, p
}

// count is how many of the calls were of method.
func (f *toolFake) count(method string) int {
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, method+" ") {
			n++
		}
	}
	return n
}

func (f *toolFake) ChainExists(ctx context.Context, t kiptables.Table, chain string) (bool, error) {
	f.record("ChainExists", t, chain)
	return f.Fake.ChainExists(ctx, t, chain)
}

func (f *toolFake) EnsureChain(ctx context.Context, t kiptables.Table, chain string) error {
	f.record("EnsureChain", t, chain)
	return f.Fake.EnsureChain(ctx, t, chain)
}

func (f *toolFake) EnsureRuleAtFront(ctx context.Context, t kiptables.Table, chain string, rule ...string) error {
	f.record("EnsureRuleAtFront", t, chain+" "+kiptables.JoinArgs(rule))
	return f.Fake.EnsureRuleAtFront(ctx, t, chain, rule...)
}

func (f *toolFake) Save(ctx context.Context, t kiptables.Table) ([]byte, error) {
	f.record("Save", t, "")
	return f.Fake.Save(ctx, t)
}

func (f *toolFake) ChainNames(ctx context.Context, t kiptables.Table) ([]string, error) {
	f.record("ChainNames", t, "")
	return f.Fake.ChainNames(ctx, t)
}

func (f *toolFake) Restore(ctx context.Context, data ...[]byte) error {
	f.record("Restore", "", "")
	return f.Fake.Restore(ctx, data...)
}

func (f *toolFake) MissingChain(ctx context.Context, chain string, tables []kiptables.Table) (kiptables.Table, error) {
	f.record("MissingChain", "", chain)
	return f.Fake.MissingChain(ctx, chain, tables)
}

func (f *toolFake) ListEnsuring(ctx context.Context, req []kiptables.ListRequest) (map[kiptables.Table][]byte, error) {
	f.record("ListEnsuring", "", "")
	return f.Fake.ListEnsuring(ctx, req)
}

// TestFullSyncChecksJumpsWithOneListing: on iptables-nft a full sync
// finds its canaries and jumps in place with a single tool run; what is
// missing is added, a jump at the front of its chain as upstream's
// prepend does, and the rules are those of the per-table save path.
func TestFullSyncChecksJumpsWithOneListing(t *testing.T) {
	st := upstreamState()
	fake, p := syncToolFake(t, st)
	saved, _ := syncFake(t, st, Options{})
	if got, want := fake.Dump(), saved.Dump(); got != want {
		t.Errorf("first sync on nft differs from the save path:\n%s", proxytest.LineDiff(want, got))
	}
	full := *st
	full.Changed = nil
	fake.calls = nil
	if err := p.Sync(ctx, &full, proxy.FullSync); err != nil {
		t.Fatal(err)
	}
	t.Logf("full sync with everything in place: %d tool calls: %q", len(fake.calls), fake.calls)
	if !slices.Equal(fake.calls, []string{"ListEnsuring  "}) {
		t.Errorf("full sync with everything in place made %d tool calls, want the one listing:\n%s", len(fake.calls), strings.Join(fake.calls, "\n"))
	}

	// Someone deletes a jump from the middle of filter INPUT, nat's
	// POSTROUTING jump and nat's canary.
	nodePorts := jumpTo(kiptables.TableFilter, kiptables.ChainInput, chainNodePorts)
	postrouting := jumpTo(kiptables.TableNAT, kiptables.ChainPostrouting, chainPostrouting)
	for _, j := range []jump{nodePorts, postrouting} {
		if err := fake.DeleteRule(ctx, j.table, j.from, j.args()...); err != nil {
			t.Fatal(err)
		}
	}
	fake.DeleteChain(kiptables.TableNAT, chainCanary)
	fake.calls = nil
	if err := p.Sync(ctx, &full, proxy.FullSync); err != nil {
		t.Fatal(err)
	}
	t.Logf("full sync with two jumps and a canary gone: %d tool calls: %q", len(fake.calls), fake.calls)
	want := []string{"ListEnsuring  ",
		// Each chain's only jump went: nothing proves the chain exists.
		"ChainExists nat " + chainPostrouting,
		"ChainExists filter " + chainNodePorts,
		// Both jumps in one run.
		"Restore  "}
	if !slices.Equal(fake.calls, want) {
		t.Errorf("tool calls:\n%s\nwant\n%s", strings.Join(fake.calls, "\n"), strings.Join(want, "\n"))
	}
	if fake.Table(kiptables.TableNAT).Chains[chainCanary] == nil {
		t.Error("nat's canary was not recreated")
	}
	// Back at the front, as kube-proxy's prepend puts a missing jump.
	input := fake.Table(kiptables.TableFilter).Chains[kiptables.ChainInput].Rules
	wantInput := []string{kiptables.JoinArgs(nodePorts.args()), "-j KUBE-FIREWALL",
		`-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`,
		`-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`}
	if !slices.Equal(input, wantInput) {
		t.Errorf("filter INPUT:\n got %q\nwant %q", input, wantInput)
	}
	if got := fake.Table(kiptables.TableNAT).Chains[kiptables.ChainPostrouting].Rules; !slices.Equal(got, []string{kiptables.JoinArgs(postrouting.args())}) {
		t.Errorf("nat POSTROUTING = %q", got)
	}
}

// TestFullSyncAddsMissingJumpsWithOneRestore: with every jump and canary
// missing — a first start, or another program flushed the built-in chains
// and deleted the canaries — a full sync on iptables-nft adds them all
// with one restore after the listing; the chains no jump proves are
// checked one by one (over netlink, by kiptables.Client), and not
// recreated (flushed) when they are there.
func TestFullSyncAddsMissingJumpsWithOneRestore(t *testing.T) {
	st := upstreamState()
	fake := &toolFake{Fake: kiptables.NewFake()}
	p := NewWithInterface(st.Family, fake, Options{})
	if err := p.Sync(ctx, st, proxy.RecoverySync); err != nil {
		t.Fatal(err)
	}
	t.Logf("first start: %d tool calls: %q", len(fake.calls), fake.calls)
	targets := map[string]bool{} // table/chain of each jump's target
	for _, j := range append(slices.Clone(jumps), kubeletJumps...) {
		targets[string(j.table)+"/"+j.to] = true
	}
	check := func(when string) {
		t.Helper()
		// The rest is the read-back of nat's chains (a recovery sync).
		if n := fake.count("ListEnsuring") + fake.count("Restore") + fake.count("ChainExists"); n != 2+len(targets) ||
			n+fake.count("ChainNames") != len(fake.calls) || fake.count("Restore") != 1 {
			t.Errorf("%s: %d tool calls, want a listing, %d chain checks, one restore and the read-back:\n%s",
				when, len(fake.calls), len(targets), strings.Join(fake.calls, "\n"))
		}
	}
	check("first start")
	saved, _ := syncFake(t, st, Options{})
	want := saved.Dump()
	if got := fake.Dump(); got != want {
		t.Errorf("first start on nft differs from the save path:\n%s", proxytest.LineDiff(want, got))
	}

	// Another program flushes the built-in chains and deletes the
	// canaries; our chains and their rules stay.
	for _, table := range canaryTables {
		for _, c := range fake.Table(table).Chains {
			for _, rule := range c.Rules {
				if c.Builtin {
					if err := fake.DeleteRule(ctx, table, c.Name, kiptables.SplitRule(rule)...); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		fake.DeleteChain(table, chainCanary)
	}
	fake.calls = nil
	if err := p.Sync(ctx, st, proxy.RecoverySync); err != nil {
		t.Fatal(err)
	}
	t.Logf("after a flush of the built-in chains: %d tool calls: %q", len(fake.calls), fake.calls)
	check("after the flush")
	if got := fake.Dump(); got != want {
		t.Errorf("after the flush:\n%s", proxytest.LineDiff(want, got))
	}
}

// jumpTo is our jump from a built-in chain to chain.
func jumpTo(table kiptables.Table, from, chain string) jump {
	for _, j := range jumps {
		if j.table == table && j.from == from && j.to == chain {
			return j
		}
	}
	panic("no jump " + string(table) + " " + from + " -> " + chain)
}

// TestCanaryPollIsOneToolRun: the canary poll reads every table's canary
// with one tool run, whichever of them is gone.
func TestCanaryPollIsOneToolRun(t *testing.T) {
	fake, p := syncToolFake(t, upstreamState())
	for _, gone := range append([]kiptables.Table{""}, canaryTables...) {
		if gone != "" {
			fake.DeleteChain(gone, chainCanary)
		}
		fake.calls = nil
		missing, err := p.CanaryMissing(ctx)
		t.Logf("canary gone from %q: missing %t, %d tool calls: %q", gone, missing, len(fake.calls), fake.calls)
		if err != nil || missing != (gone != "") || len(fake.calls) != 1 {
			t.Errorf("canary gone from %q: CanaryMissing = %t, %v with %d tool calls; want %t, nil with 1",
				gone, missing, err, len(fake.calls), gone != "")
		}
		if gone != "" {
			if err := fake.Fake.EnsureChain(ctx, gone, chainCanary); err != nil {
				t.Fatal(err)
			}
		}
	}
}
