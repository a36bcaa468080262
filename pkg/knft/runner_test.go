package knft

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	tx := knftables.NewFake(knftables.IPv4Family, "kube-proxy").NewTransaction()
	tx.Add(&knftables.Element{Set: "s"}) // no key
	if err := nftRunner("/nonexistent/nft")(context.Background(), tx); err == nil || !strings.Contains(err.Error(), "invalid transaction") {
		t.Errorf("got %v, want an invalid-transaction error", err)
	}
}

// hungBinary writes an executable named name into a temp dir that sleeps
// far longer than any test waits, as a hung nft or iptables-restore would.
func hungBinary(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// shortExecTimeout makes nft runs time out after 200 ms for one test.
func shortExecTimeout(t *testing.T) {
	old := execTimeout
	execTimeout = 200 * time.Millisecond
	t.Cleanup(func() { execTimeout = old })
}

// TestRunnerTimesOutHungNFT: a hung nft must fail the transaction, saying
// so, instead of blocking the sync for ever. The 30 s guard only catches a
// runner that never returns; the timeout is 200 ms.
func TestRunnerTimesOutHungNFT(t *testing.T) {
	shortExecTimeout(t)
	nft := hungBinary(t, "nft")
	tx := knftables.NewFake(knftables.IPv4Family, "kube-proxy").NewTransaction()
	tx.Add(&knftables.Table{})
	done := make(chan error, 1)
	go func() { done <- nftRunner(nft)(context.Background(), tx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("got %v, want a timed-out error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nftRunner did not return: no timeout on the nft process")
	}
}

// blockingNFT's calls block until their context ends, as knftables' would
// on a hung nft.
type blockingNFT struct{ knftables.Interface }

func (blockingNFT) List(ctx context.Context, _ string) ([]string, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (blockingNFT) Run(ctx context.Context, _ *knftables.Transaction) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestKnftablesCallsTimeOut(t *testing.T) {
	shortExecTimeout(t)
	nft := timeoutNFT{blockingNFT{knftables.NewFake(knftables.IPv4Family, "kube-proxy")}}
	done := make(chan error, 2)
	go func() {
		_, err := nft.List(context.Background(), "chains")
		done <- err
		done <- deleteTable(context.Background(), nft)
	}()
	for range 2 {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "timed out") {
				t.Errorf("got %v, want a timed-out error", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a knftables call did not return: no deadline")
		}
	}
	// A caller's own cancellation is not reported as a timeout.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := nft.List(ctx, "chains"); err == nil || strings.Contains(err.Error(), "timed out") {
		t.Errorf("cancelled call: got %v, want a plain cancellation", err)
	}
}
