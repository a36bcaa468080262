package nftables_test

import (
	"context"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestCleanupTables: other modes' start-up cleanup runs no nft when there
// is no kube-proxy table, and deletes the tables that exist.
func TestCleanupTables(t *testing.T) {
	netnstest.RequireKernel(t, "nft")
	execs := netnstest.RecordExecs(t, netnstest.ProxyTools()...)
	ctx := context.Background()
	lab := netnstest.New(t)
	ns, err := lab.NewNS("node")
	if err != nil {
		t.Fatal(err)
	}
	// A table of another name, in the same families, is not ours.
	if _, err := ns.RunInput(ctx, "table ip other {}\ntable ip6 other {}\n", "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	cleanup := func() error { return nftables.CleanupTables(ctx) }
	if ran := execs.Runs(t, ns, cleanup); len(ran) > 0 {
		t.Errorf("tools ran with no kube-proxy table: %q", ran)
	}
	rules := "table ip kube-proxy { chain x { } ; }\ntable ip6 kube-proxy { chain x { } ; }\n"
	if _, err := ns.RunInput(ctx, rules, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(cleanup); err != nil {
		t.Fatal(err)
	}
	tables, err := ns.ListTables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"table ip other": true, "table ip6 other": true}
	if len(tables) != len(want) || !want[tables[0]] || !want[tables[1]] {
		t.Errorf("tables after cleanup: %q, want only the two \"other\" tables", tables)
	}
}
