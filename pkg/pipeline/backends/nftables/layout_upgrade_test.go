package nftables

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// layoutCase is the shared case the layout tests sync: a load balancer
// with source ranges, a node port and a cluster IP.
const layoutCase = "loadBalancerSourceRanges"

// fakeWith is a strict fake holding dump, and the State of the layout
// case; after each transaction every flow of the case must reach what the
// State says, and the transaction is appended to txs.
func fakeWith(t *testing.T, family proxy.IPFamily, dump string) (fake *strictFake, st *desired.State, txs *[]string) {
	t.Helper()
	fake = newStrictFake(specFor(family).family)
	if err := fake.ParseDump(dump); err != nil {
		t.Fatal(err)
	}
	c := caseNamed(t, layoutCase)
	st = proxytest.BuildState(t, c, family)
	checkFlows(t, fake, c, st, "before")
	txs = recordTransactions(t, fake, c, st)
	return fake, st, txs
}

// recordTransactions makes fake check every flow of c after each
// transaction and append the transaction to the list it returns.
func recordTransactions(t *testing.T, fake *strictFake, c proxytest.Case, st *desired.State) *[]string {
	txs := new([]string)
	fake.afterRun = func() {
		checkFlows(t, fake, c, st, fmt.Sprintf("after transaction %d", len(*txs)+1))
		*txs = append(*txs, fake.LastTransaction.String())
	}
	return txs
}

// checkFlows fails t unless every flow of c to st's family reaches, in
// fake's table, what the flow wants.
func checkFlows(t *testing.T, fake *strictFake, c proxytest.Case, st *desired.State, when string) {
	t.Helper()
	for _, flow := range c.Flows {
		if !st.Family.Contains(flow.Dest) {
			continue
		}
		if got := newTracer(t, fake, st).trace(flow); !got.Equal(flow.Want) {
			t.Fatalf("%s: flow %q reached %s, want %s\n%s", when, flow.Name, got, flow.Want, fake.LastTransaction)
		}
	}
}

// transactionWith returns the one transaction of txs that holds line.
func transactionWith(t *testing.T, txs []string, line string) string {
	t.Helper()
	var found []string
	for _, tx := range txs {
		if strings.Contains(tx, line) {
			found = append(found, tx)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d transactions hold %q, want 1:\n%s", len(found), line, strings.Join(txs, "\n---\n"))
	}
	return found[0]
}

// requireLines fails unless tx holds every line of want.
func requireLines(t *testing.T, tx string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(tx, w) {
			t.Errorf("the transaction has no %q:\n%s", w, tx)
		}
	}
}

// TestUpgradeFromRetypedLayout syncs over a table whose service-ips is a
// set, whose service-nodeports has another key type and whose filter-input
// is a regular chain (retypedLayout), one unit per transaction: each of
// them is replaced with every rule that reads it in one transaction, every
// flow is right after each transaction, and the table ends as a fresh
// sync leaves it. On the version before, every sync failed: the rule
// "vmap @service-ips" over the set ("Expression is not a map").
func TestUpgradeFromRetypedLayout(t *testing.T) {
	for _, family := range proxy.Families {
		t.Run(string(family), func(t *testing.T) {
			old := retypedLayout(t, readDump(t, "unmarked-loadbalancersourceranges-"+strings.ToLower(string(family))+".dump"))
			fake, st, txs := fakeWith(t, family, old)
			p := NewWithInterface(family, fakeKernel(fake))
			if err := p.ReadBack(t.Context()); err != nil {
				t.Fatal(err)
			}
			if msg, _ := layoutNote(p.store); !strings.Contains(msg, "without a layout marker") {
				t.Errorf("the read-back says %q, want a table without a marker", msg)
			}
			syncUnitByUnit(t, fake, st)
			fam, ip := specFor(family).family, specFor(family).ip
			tx := transactionWith(t, *txs, "delete set "+string(fam)+" kube-proxy service-ips")
			requireLines(t, tx,
				"flush chain "+string(fam)+" kube-proxy services",
				"add map "+string(fam)+" kube-proxy service-ips",
				"add element "+string(fam)+" kube-proxy service-ips",
				"delete map "+string(fam)+" kube-proxy service-nodeports",
				"add map "+string(fam)+" kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; }",
				"add element "+string(fam)+" kube-proxy service-nodeports",
				"add rule "+string(fam)+" kube-proxy services "+ip+" daddr . meta l4proto . th dport vmap @service-ips",
				"delete chain "+string(fam)+" kube-proxy filter-input",
				"add chain "+string(fam)+" kube-proxy filter-input { type filter hook input priority 0 ; }")
			if last := (*txs)[len(*txs)-1]; !strings.Contains(last, "add chain "+string(fam)+" kube-proxy "+layoutMarker) {
				t.Errorf("the last transaction does not add the marker:\n%s", last)
			}
			fake.afterRun = nil
			if stats := mustSync(t, NewWithInterface(family, fakeKernel(fake)), st); stats.Operations != 0 {
				t.Errorf("restart after the upgrade sent %d operations, want 0:\n%s", stats.Operations, fake.LastTransaction)
			}
		})
	}
}

// TestAdoptNewerLayout is a rollback from a newer svcproxy whose layout
// differs in those three objects (the marker of the layout after this one): the read-back
// says so, the objects are replaced as in an upgrade, and the newer marker
// goes in the transaction that writes this version's, the last one.
func TestAdoptNewerLayout(t *testing.T) {
	newer := markerPrefix + strconv.Itoa(layoutVersion+1)
	dump := retypedLayout(t, readDump(t, "unmarked-loadbalancersourceranges-ipv4.dump")) +
		"add chain ip kube-proxy " + newer + "\n"
	fake, st, txs := fakeWith(t, proxy.IPv4, dump)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	if err := p.ReadBack(t.Context()); err != nil {
		t.Fatal(err)
	}
	if msg, found := layoutNote(p.store); found != layoutVersion+1 || !strings.Contains(msg, "newer svcproxy") {
		t.Errorf("the read-back says %q (layout %d), want a newer svcproxy's layout %d", msg, found, layoutVersion+1)
	}
	syncUnitByUnit(t, fake, st)
	transactionWith(t, *txs, "delete set ip kube-proxy service-ips")
	last := (*txs)[len(*txs)-1]
	requireLines(t, last, "delete chain ip kube-proxy "+newer, "add chain ip kube-proxy "+layoutMarker)
}

// TestAdoptUnmarkedTable: a table the version before markers wrote (its
// own golden dump), and the same with layout 1's marker, have the one
// firewall-allow set of the layouts before per-protocol allow sets, read
// by a rule that nft before 1.1.0 compiles into what newer kernels refuse.
// The sync adds the allow sets with their elements, then rewrites
// firewall-check's rules in one transaction, then deletes the old set
// with the marker's change; every flow is right after each transaction
// (fakeWith), and a restart then writes nothing.
func TestAdoptUnmarkedTable(t *testing.T) {
	for _, family := range proxy.Families {
		for _, marker := range []string{"", markerPrefix + "1"} {
			t.Run(string(family)+"/"+marker, func(t *testing.T) {
				fam := string(specFor(family).family)
				dump := readDump(t, "unmarked-loadbalancersourceranges-"+strings.ToLower(string(family))+".dump")
				if marker != "" {
					dump += "add chain " + fam + " kube-proxy " + marker + "\n"
				}
				fake, st, txs := fakeWith(t, family, dump)
				mustSync(t, NewWithInterface(family, fakeKernel(fake)), st)
				requireFirewallUpgrade(t, *txs, fam, marker)
				fake.afterRun = nil
				if stats := mustSync(t, NewWithInterface(family, fakeKernel(fake)), st); stats.Operations != 0 {
					t.Errorf("a restart sent %d operations", stats.Operations)
				}
			})
		}
	}
}

// requireFirewallUpgrade fails unless txs, the transactions of an upgrade
// from the single firewall-allow set, add the allow sets before
// firewall-check's rules are rewritten, rewrite them all in one
// transaction, and delete the old set after, with the marker's change
// (oldMarker: the one deleted, "" none).
func requireFirewallUpgrade(t *testing.T, txs []string, fam, oldMarker string) {
	t.Helper()
	prefix := "add set " + fam + " kube-proxy "
	sets := transactionWith(t, txs, prefix+firewallAllowSet(proxy.TCP)+" ")
	for _, p := range firewallProtocols {
		requireLines(t, sets, prefix+firewallAllowSet(p)+" ")
	}
	rules := transactionWith(t, txs, "flush chain "+fam+" kube-proxy firewall-check")
	for _, p := range firewallProtocols {
		requireLines(t, rules, "@"+firewallAllowSet(p)+" drop")
	}
	last := txs[len(txs)-1]
	requireLines(t, last, "delete set "+fam+" kube-proxy firewall-allow\n", "add chain "+fam+" kube-proxy "+layoutMarker+"\n")
	if oldMarker != "" {
		requireLines(t, last, "delete chain "+fam+" kube-proxy "+oldMarker+"\n")
	}
	if i, j := slices.Index(txs, sets), slices.Index(txs, rules); i >= j || j >= len(txs)-1 {
		t.Errorf("the allow sets go in transaction %d, the rules in %d, the old set in %d: want that order:\n%s",
			i+1, j+1, len(txs), strings.Join(txs, "\n---\n"))
	}
}

// TestRollbackToRetypedLayout runs the retyped layout's render (its dump
// as a part, partFromDump) over this version's table with this version's
// engine, one unit per transaction: the reverse replacements (a map
// becomes a set, a key type narrows, a base chain becomes a regular one)
// are as atomic, every flow is right after each transaction, and the
// table ends as that layout's, without a marker.
func TestRollbackToRetypedLayout(t *testing.T) {
	c := caseNamed(t, layoutCase)
	st := proxytest.BuildState(t, c, proxy.IPv4)
	fake := syncFake(t, st)
	old := retypedLayout(t, readDump(t, "unmarked-loadbalancersourceranges-ipv4.dump"))
	txs := recordTransactions(t, fake, c, st)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	p.maxOps = 1
	syncPart(t, p, partFromDump(t, knftables.IPv4Family, old))
	tx := transactionWith(t, *txs, "delete map ip kube-proxy service-ips")
	requireLines(t, tx, "flush chain ip kube-proxy services", "add set ip kube-proxy service-ips",
		"add map ip kube-proxy service-nodeports { type inet_service : verdict ; }",
		"add chain ip kube-proxy filter-input\n", "add rule ip kube-proxy services ip daddr . meta l4proto . th dport @service-ips goto service-dispatch")
	if got, want := sortedDump(fake), sortedLines(old); got != want {
		t.Errorf("the table differs from the retyped layout's:\n%s", lineDiff(want, got))
	}
}
