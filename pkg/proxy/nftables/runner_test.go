package nftables

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

func TestCoalesceElements(t *testing.T) {
	in := strings.Join([]string{
		"add map ip kube-proxy m { type ipv4_addr : verdict ; }",
		"add element ip kube-proxy s { 10.0.0.1 }",
		"add element ip kube-proxy s { 10.0.0.2 }",
		"add element ip kube-proxy s { 10.0.0.3 }",
		"add element ip kube-proxy m { 10.0.0.1 : goto c }",
		"delete element ip kube-proxy m { 10.0.0.2 }",
		"add element ip kube-proxy m { 10.0.0.2 : goto d }",
		"delete element ip kube-proxy m { 10.0.0.3 }",
		"delete element ip kube-proxy m { 10.0.0.4 }",
		"add element ip kube-proxy s { 10.0.0.9 comment \"x\" }",
		"add rule ip kube-proxy c ip daddr { 1.1.1.1, 2.2.2.2 } accept",
		"add element ip kube-proxy s { 10.0.0.4 }",
		"",
	}, "\n")
	want := strings.Join([]string{
		"add map ip kube-proxy m { type ipv4_addr : verdict ; }",
		"add element ip kube-proxy s { 10.0.0.1, 10.0.0.2 }",
		"add element ip kube-proxy s { 10.0.0.3 }",
		"add element ip kube-proxy m { 10.0.0.1 : goto c }",
		"delete element ip kube-proxy m { 10.0.0.2 }",
		"add element ip kube-proxy m { 10.0.0.2 : goto d }",
		"delete element ip kube-proxy m { 10.0.0.3, 10.0.0.4 }",
		"add element ip kube-proxy s { 10.0.0.9 comment \"x\" }",
		"add rule ip kube-proxy c ip daddr { 1.1.1.1, 2.2.2.2 } accept",
		"add element ip kube-proxy s { 10.0.0.4 }",
		"",
	}, "\n")
	if got := coalesceElements(in, 2); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestRunnerReportsInvalidTransaction: a transaction knftables refused to
// build is not sent.
func TestRunnerReportsInvalidTransaction(t *testing.T) {
	tx := knftables.NewFake(knftables.IPv4Family, TableName).NewTransaction()
	tx.Add(&knftables.Element{Set: "s"}) // no key
	if err := nftRunner("/nonexistent/nft")(context.Background(), tx); err == nil || !strings.Contains(err.Error(), "invalid transaction") {
		t.Errorf("got %v, want an invalid-transaction error", err)
	}
}
