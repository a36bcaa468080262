package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelLayoutTransitions moves node1's table between layouts in the
// kernel scenario (IPv4), each sync one unit per transaction, with real
// connections to a cluster IP, node ports, an external and a
// load-balancer IP after every transaction and an nf_tables monitor
// telling the transactions apart:
//
//   - that table with upstream kube-proxy's firewall objects
//     (takeOverUpstreamFirewall);
//   - the table the version before markers wrote, and the same with
//     layout 1's marker: the allow sets replace the single firewall-allow
//     set, firewall-check's rules rewritten in one transaction;
//   - the retyped layout (service-ips a set, service-nodeports keyed by
//     the port, filter-input a regular chain; retypedLayout), unmarked:
//     the three are replaced, with the rules that read them, in one
//     transaction;
//   - the same with a newer svcproxy's marker (a rollback to this
//     version): the same, and the newer marker goes;
//   - back to the retyped layout, its render synced by this version's
//     engine (partFromDump): the reverse replacement, as atomic, and the
//     table ends exactly as that layout's.
//
// After each, every reachability check of the scenario passes.
func TestKernelLayoutTransitions(t *testing.T) {
	requireRoot(t)
	env := scenario.NewEnv(t)
	f := scenario.Families[0]
	st := env.NewWorld(f).Apply(t, env.Services()...)
	unmarked := readDump(t, "unmarked-scenario-ipv4.dump")
	retyped := retypedLayout(t, unmarked)
	t.Run("FromUpstreamFirewall", func(t *testing.T) { takeOverUpstreamFirewall(t, env, st, unmarked) })
	// The single firewall-allow set gives way to the allow sets: their
	// rules in one transaction, the old set deleted after.
	firewallOnes := func(t *testing.T, txs [][]string) {
		requireTransaction(t, txs, "add rule firewall-check", "delete rule firewall-check")
		if rules, gone := transactionIndex(txs, "add rule firewall-check"), transactionIndex(txs, "delete set firewall-allow"); gone <= rules {
			t.Errorf("firewall-check's rules rewritten in transaction %d, firewall-allow deleted in %d: %q", rules+1, gone+1, txs)
		}
	}
	t.Run("FromUnmarked", func(t *testing.T) { firewallOnes(t, upgradeInKernel(t, env, st, unmarked)) })
	t.Run("FromLayout1", func(t *testing.T) {
		txs := upgradeInKernel(t, env, st, unmarked+"add chain ip kube-proxy "+markerPrefix+"1\n")
		firewallOnes(t, txs)
		requireTransaction(t, txs, "delete chain "+markerPrefix+"1", "add chain "+layoutMarker)
	})
	retypedOnes := []string{"delete set service-ips", "add set service-ips", "add element service-ips",
		"delete set service-nodeports", "add set service-nodeports", "add element service-nodeports",
		"delete rule services", "add rule services", "delete chain filter-input", "add chain filter-input"}
	t.Run("FromRetyped", func(t *testing.T) {
		txs := upgradeInKernel(t, env, st, retyped)
		requireTransaction(t, txs, retypedOnes...)
	})
	t.Run("FromNewerLayout", func(t *testing.T) {
		newer := markerPrefix + strconv.Itoa(layoutVersion+1)
		txs := upgradeInKernel(t, env, st, retyped+"add chain ip kube-proxy "+newer+"\n")
		requireTransaction(t, txs, retypedOnes...)
		requireTransaction(t, txs, "delete chain "+newer, "add chain "+layoutMarker)
	})
	t.Run("BackToRetyped", func(t *testing.T) {
		txs := monitored(t, env, func(k knft.Interface) {
			p := NewWithInterface(proxy.IPv4, k)
			p.maxOps = 1
			syncPart(t, p, partFromDump(t, specFor(proxy.IPv4).family, retyped))
		})
		requireTransaction(t, txs, retypedOnes...)
		requireTransaction(t, txs, "delete chain "+layoutMarker)
		if got, want := readBackIn(t, env.Node1.NS), tableOf(t, retyped); !slices.Equal(got, want) {
			t.Errorf("the table differs from the retyped layout's (- layout, + table):\n%s", diffLines(want, got))
		}
		env.ReachableCases(t, f)
	})
}

// upgradeInKernel loads dump as node1's table, checks that it works, and
// syncs st over it with a new Proxier (monitored); then every
// reachability check, and a restart that writes nothing. It returns the
// sync's transactions.
func upgradeInKernel(t *testing.T, env *scenario.Env, st *desired.State, dump string) [][]string {
	t.Helper()
	ctx := context.Background()
	_, _ = env.Node1.NS.Run(ctx, "nft", "delete", "table", "ip", TableName)
	if out, err := env.Node1.NS.RunInput(ctx, dump, "nft", "-f", "-"); err != nil {
		t.Fatalf("loading the old table: %v: %s", err, out)
	}
	if err := reachable(env); err != nil {
		t.Fatalf("the old table: %v", err)
	}
	txs := monitored(t, env, func(k knft.Interface) {
		p := NewWithInterface(proxy.IPv4, k)
		p.maxOps = 1
		if err := p.Sync(ctx, st, proxy.RecoverySync); err != nil {
			// Not Fatal: this runs in the namespace's goroutine, which
			// Fatal would end without returning to the test.
			t.Errorf("sync: %v", err)
		}
	})
	env.ReachableCases(t, scenario.Families[0])
	err := env.Node1.NS.Do(func() error {
		k, err := knft.New(specFor(proxy.IPv4).family, TableName)
		if err != nil {
			return err
		}
		defer k.Close()
		p := NewWithInterface(proxy.IPv4, k)
		if err := p.Sync(ctx, st, proxy.RecoverySync); err != nil {
			return err
		}
		if n := p.last.Operations; n != 0 {
			return fmt.Errorf("a restart after the upgrade sent %d operations", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return txs
}

// monitored runs sync in node1's namespace with a kernel Interface that
// commits one transaction at a time and checks reachability after each,
// and returns the transactions the kernel announced.
func monitored(t *testing.T, env *scenario.Env, sync func(k knft.Interface)) [][]string {
	t.Helper()
	mon, err := env.Node1.NS.StartNftMonitor()
	if err != nil {
		t.Fatal(err)
	}
	err = env.Node1.NS.Do(func() error {
		k, err := knft.New(specFor(proxy.IPv4).family, TableName)
		if err != nil {
			return err
		}
		defer k.Close()
		probed := &probedKernel{Interface: k, after: func(n int) {
			if err := reachable(env); err != nil {
				t.Errorf("after transaction %d: %v", n, err)
			}
		}}
		sync(probed)
		t.Logf("%d transactions, each followed by the reachability checks", probed.n)
		return nil
	})
	txs := mon.StopTransactions()
	if err != nil {
		t.Fatal(err)
	}
	return txs
}

// probedKernel commits one transaction at a time and calls after with the
// number of each.
type probedKernel struct {
	knft.Interface
	after func(n int)
	n     int
}

func (k *probedKernel) Apply(ctx context.Context, txs [][]*knft.Unit) (knft.Stats, error) {
	var total knft.Stats
	for _, tx := range txs {
		s, err := k.Interface.Apply(ctx, [][]*knft.Unit{tx})
		total.Transactions += s.Transactions
		total.Operations += s.Operations
		total.NetlinkOps += s.NetlinkOps
		if err != nil {
			return total, err
		}
		k.n++
		k.after(k.n)
	}
	return total, nil
}

// reachable checks, from the outside client, a cluster IP (TCP and UDP),
// node ports (TCP and UDP), an external IP and a load-balancer IP with
// source ranges: every kind of frontend the layouts dispatch differently.
func reachable(env *scenario.Env) error {
	f := scenario.Families[0]
	node := env.Node1.IP(false)
	probes := []struct {
		proto proxy.Protocol
		dst   netip.AddrPort
	}{
		{proxy.TCP, netip.AddrPortFrom(f.ClusterIP(10), scenario.SvcPort)},
		{proxy.UDP, netip.AddrPortFrom(f.ClusterIP(10), scenario.SvcPort)},
		{proxy.TCP, netip.AddrPortFrom(node, 30010)},
		{proxy.UDP, netip.AddrPortFrom(node, 30011)},
		{proxy.TCP, netip.AddrPortFrom(f.ExternalIP(10), scenario.SvcPort)},
		{proxy.TCP, netip.AddrPortFrom(f.LBIP(11), scenario.SvcPort)},
	}
	var errs []string
	for _, p := range probes {
		if _, err := env.FromClient(f).Ask(p.proto, p.dst); err != nil {
			errs = append(errs, fmt.Sprintf("%s to %s: %v", p.proto, p.dst, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// requireTransaction fails unless one transaction of txs holds every
// notification of want.
func requireTransaction(t *testing.T, txs [][]string, want ...string) {
	t.Helper()
	for _, tx := range txs {
		if !slices.Contains(tx, want[0]) {
			continue
		}
		for _, w := range want {
			if !slices.Contains(tx, w) {
				t.Errorf("the transaction with %q has no %q: %q", want[0], w, tx)
			}
		}
		t.Logf("one transaction of %d notifications holds %q", len(tx), want)
		return
	}
	t.Errorf("no transaction has %q: %q", want[0], txs)
}

// readBackIn is the kernel side of a store that read back the table in
// ns (kernelSide).
func readBackIn(t *testing.T, ns *netnstest.NS) []string {
	t.Helper()
	s := newStore()
	err := ns.Do(func() error {
		k, err := knft.New(specFor(proxy.IPv4).family, TableName)
		if err != nil {
			return err
		}
		defer k.Close()
		return s.readBack(context.Background(), k, proxy.IPv4)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := kernelSide(s)
	for name, c := range s.chains {
		out = append(out, fmt.Sprintf("chain %s hook %+v", name, c.hook))
	}
	for name, st := range s.sets {
		out = append(out, fmt.Sprintf("set %s type %+v", name, st.typ))
	}
	slices.Sort(out)
	return out
}

// tableOf is what the read-back sees of dump loaded into a namespace of
// its own.
func tableOf(t *testing.T, dump string) []string {
	t.Helper()
	ns, err := netnstest.New(t).NewNS("layout")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ns.RunInput(context.Background(), dump, "nft", "-f", "-"); err != nil {
		t.Fatalf("loading: %v: %s", err, out)
	}
	return readBackIn(t, ns)
}
