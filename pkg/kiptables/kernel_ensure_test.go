package kiptables

import (
	"context"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestKernelEnsureAtFront: the real tools of both flavours and families,
// in a throwaway namespace. ListEnsuring creates the canaries and tells
// nat's OUTPUT from filter's; EnsureAtFront writes what the Fake writes,
// and once everything is there it runs one listing on iptables-nft and
// one iptables-save per table on iptables-legacy, and nothing else.
func TestKernelEnsureAtFront(t *testing.T) {
	netnstest.RequireKernel(t, "iptables-nft-restore", "iptables-legacy-restore", "ip6tables-nft-restore", "ip6tables-legacy-restore")
	execs := netnstest.RecordExecs(t, netnstest.ProxyTools()...)
	const natOutput = "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n"
	forEachClient(t, "", func(t *testing.T, ns *netnstest.NS, c *Client) {
		ctx := context.Background()
		var listed map[Table][]byte
		var err error
		execs.Runs(t, ns, func() error {
			if err := c.Restore(ctx, []byte("*filter\n:KUBE-FILTERED - [0:0]\n-A OUTPUT -j KUBE-FILTERED\nCOMMIT\n"+
				"*nat\n:KUBE-SERVICES - [0:0]\n"+natOutput+"COMMIT\n")); err != nil {
				return err
			}
			listed, err = c.ListEnsuring(ctx, []ListRequest{
				{Table: TableMangle, Empty: []string{"KUBE-CANARY"}},
				{Table: TableNAT, Empty: []string{"KUBE-CANARY"}, List: []string{ChainPrerouting, ChainOutput}},
				{Table: TableFilter, List: []string{ChainOutput, ChainInput}},
			})
			return err
		})
		if got := string(listed[TableNAT]); got != natOutput {
			t.Errorf("nat listed %q, want %q", got, natOutput)
		}
		if got := string(listed[TableFilter]); got != "-A OUTPUT -j KUBE-FILTERED\n" {
			t.Errorf("filter listed %q", got)
		}
		for _, table := range []Table{TableMangle, TableNAT} {
			if ok := inNS(t, ns, func() (bool, error) { return c.ChainExists(ctx, table, "KUBE-CANARY") }); !ok {
				t.Errorf("no canary in %s", table)
			}
		}

		fake := NewFake()
		if _, err := EnsureAtFront(ctx, fake, natFront); err != nil {
			t.Fatal(err)
		}
		execs.Runs(t, ns, func() error { _, err := EnsureAtFront(ctx, c, natFront); return err })
		for _, table := range []Table{TableNAT, TableFilter} {
			want, _ := fake.Save(ctx, table)
			got := inNS(t, ns, func() ([]byte, error) { return c.Save(ctx, table) })
			if w, g := ruleLines(want), ruleLines(got); w != g {
				t.Errorf("%s holds\n%s\nthe Fake\n%s", table, g, w)
			}
		}
		ran := execs.Runs(t, ns, func() error { _, err := EnsureAtFront(ctx, c, natFront); return err })
		t.Logf("everything in place: %d tool runs: %q", len(ran), ran)
		want := 1
		if c.Flavour() == FlavourLegacy {
			want = len(natFront)
		}
		if len(ran) != want {
			t.Errorf("everything in place: %d tool runs, want %d:\n%s", len(ran), want, strings.Join(ran, "\n"))
		}
	})
}

// TestKernelEnsureAtFrontAddsInOneRestore: from each of frontStarts, the
// real tools of both flavours and families end up with the rules, in the
// order, that the calls one at a time leave in the Fake, a target
// chain's rules kept; what is missing is added by one restore after the
// read (a save per table on iptables-legacy, the listing on iptables-nft,
// whose check of a chain no jump proves runs no tool), and nothing else
// runs.
func TestKernelEnsureAtFrontAddsInOneRestore(t *testing.T) {
	netnstest.RequireKernel(t, "iptables-nft-restore", "iptables-legacy-restore", "ip6tables-nft-restore", "ip6tables-legacy-restore")
	execs := netnstest.RecordExecs(t, netnstest.ProxyTools()...)
	ctx := context.Background()
	for name, start := range frontStarts {
		want := oneByOne(t, start)
		forEachClient(t, name+"/", func(t *testing.T, ns *netnstest.NS, c *Client) {
			if start != "" {
				execs.Runs(t, ns, func() error { return c.Restore(ctx, []byte(start)) })
			}
			ran := execs.Runs(t, ns, func() error { _, err := EnsureAtFront(ctx, c, natFront); return err })
			t.Logf("%d tool runs: %q", len(ran), ran)
			for _, table := range []Table{TableNAT, TableFilter} {
				w, _ := want.Save(ctx, table)
				got := inNS(t, ns, func() ([]byte, error) { return c.Save(ctx, table) })
				if w, g := ruleLines(w), ruleLines(got); w != g {
					t.Errorf("%s holds\n%s\none at a time\n%s", table, g, w)
				}
			}
			reads := 1
			if c.Flavour() == FlavourLegacy {
				reads = len(natFront)
			}
			if n := restores(ran); n != 1 || len(ran) != reads+1 {
				t.Errorf("%d tool runs, %d restores besides the read; want %d and 1:\n%s", len(ran), n, reads+1, strings.Join(ran, "\n"))
			}
		})
	}
}

// TestKernelMissingChain: the real tools of both flavours and families
// tell which table lacks a chain with one run that changes nothing, and a
// table the tool cannot read is an error, not a missing chain.
func TestKernelMissingChain(t *testing.T) {
	netnstest.RequireKernel(t, "iptables-nft-restore", "iptables-legacy-restore", "ip6tables-nft-restore", "ip6tables-legacy-restore")
	execs := netnstest.RecordExecs(t, netnstest.ProxyTools()...)
	ctx := context.Background()
	tables := []Table{TableMangle, TableNAT, TableFilter}
	forEachClient(t, "", func(t *testing.T, ns *netnstest.NS, c *Client) {
		execs.Runs(t, ns, func() error {
			return c.Restore(ctx, []byte("*mangle\n:KUBE-C - [0:0]\nCOMMIT\n*filter\n:KUBE-C - [0:0]\nCOMMIT\n"))
		})
		before := inNS(t, ns, func() ([]byte, error) { return c.Save(ctx, TableFilter) })
		for _, tc := range []struct {
			in   []Table
			want Table
		}{{[]Table{TableMangle, TableFilter}, ""}, {tables, TableNAT}, {[]Table{TableNAT}, TableNAT}} {
			var got Table
			ran := execs.Runs(t, ns, func() (err error) { got, err = c.MissingChain(ctx, "KUBE-C", tc.in); return err })
			if got != tc.want || len(ran) != 1 {
				t.Errorf("in %q: missing from %q with %d tool runs %q; want %q with 1", tc.in, got, len(ran), ran, tc.want)
			}
		}
		if err := ns.Do(func() error {
			_, err := c.MissingChain(ctx, "KUBE-C", []Table{TableMangle, "nosuch"})
			return err
		}); err == nil {
			t.Error("no error for a table the tool cannot read")
		}
		after := inNS(t, ns, func() ([]byte, error) { return c.Save(ctx, TableFilter) })
		if ruleLines(before) != ruleLines(after) || !strings.Contains(string(after), ":KUBE-C") {
			t.Errorf("filter changed:\n%s\nnow\n%s", before, after)
		}
	})
}

// restores counts the runs of iptables-restore that are not listings
// (ListEnsuring's restore is told by its missing --counters).
func restores(ran []string) int {
	n := 0
	for _, r := range ran {
		if strings.Contains(r, "-restore ") && strings.Contains(r, "--counters") {
			n++
		}
	}
	return n
}

// forEachClient runs fn as a subtest (named prefix + family/flavour)
// for each flavour and family, with a client of those tools made in a
// fresh namespace.
func forEachClient(t *testing.T, prefix string, fn func(t *testing.T, ns *netnstest.NS, c *Client)) {
	for _, fam := range []proxy.IPFamily{proxy.IPv4, proxy.IPv6} {
		for _, fl := range []Flavour{FlavourNFT, FlavourLegacy} {
			t.Run(prefix+string(fam)+"/"+string(fl), func(t *testing.T) {
				ns, err := netnstest.New(t).NewNS("ipt")
				if err != nil {
					t.Fatal(err)
				}
				fn(t, ns, newInNS(t, ns, fam, fl))
			})
		}
	}
}

// newInNS returns a client of the flavour's tools, made inside ns.
func newInNS(t *testing.T, ns *netnstest.NS, fam proxy.IPFamily, fl Flavour) *Client {
	return inNS(t, ns, func() (*Client, error) { return New(fam, fl) })
}

// inNS runs fn in ns, failing the test on an error.
func inNS[T any](t *testing.T, ns *netnstest.NS, fn func() (T, error)) T {
	t.Helper()
	var v T
	if err := ns.Do(func() error {
		var err error
		v, err = fn()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// ruleLines are the "-A" lines of iptables-save output, in order.
func ruleLines(save []byte) string {
	var out []string
	for _, l := range strings.Split(string(save), "\n") {
		if strings.HasPrefix(l, "-A ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
