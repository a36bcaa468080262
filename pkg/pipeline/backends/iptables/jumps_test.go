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
// doubles as nat's read-back) and records each call that runs a tool,
// restores aside.
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
		"EnsureChain nat " + chainPostrouting,
		"EnsureRuleAtFront nat " + postrouting.from + " " + kiptables.JoinArgs(postrouting.args()),
		"EnsureChain filter " + chainNodePorts,
		"EnsureRuleAtFront filter " + nodePorts.from + " " + kiptables.JoinArgs(nodePorts.args())}
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

// jumpTo is our jump from a built-in chain to chain.
func jumpTo(table kiptables.Table, from, chain string) jump {
	for _, j := range jumps {
		if j.table == table && j.from == from && j.to == chain {
			return j
		}
	}
	panic("no jump " + string(table) + " " + from + " -> " + chain)
}
