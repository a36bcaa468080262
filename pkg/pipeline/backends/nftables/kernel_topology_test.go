package nftables_test

import (
	"context"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// The kernel tests run in pkg/testing/netnstest/scenario's topology (a
// two-node namespace cluster with pods and an outside client); this file
// holds what is nftables-specific: the requirements and the Proxier calls
// made inside node1's namespace.

// requireKernel fails (never skips): these are the only tests that prove the
// ruleset works in a real kernel, so their absence must be loud.
func requireKernel(t *testing.T) { t.Helper(); netnstest.RequireKernel(t, "nft") }

// newProxier creates and initializes a Proxier inside the node namespace.
func newProxier(t *testing.T, env *scenario.Env, f scenario.Fam) *nftables.Proxier {
	t.Helper()
	var p *nftables.Proxier
	err := env.Node1.NS.Do(func() (err error) {
		if p, err = nftables.New(f.Family, nftables.Options{}); err != nil {
			return err
		}
		return p.Init(context.Background())
	})
	if err != nil {
		t.Fatalf("%s proxier: %v", f.Family, err)
	}
	t.Cleanup(p.Close)
	return p
}

// syncIn runs Sync inside the node namespace: knftables runs nft, which
// inherits the namespace of the calling thread.
func syncIn(t *testing.T, env *scenario.Env, p *nftables.Proxier, st *desired.State) {
	t.Helper()
	if err := env.Node1.NS.Do(func() error { return p.Sync(context.Background(), st, proxytest.ModeOf(st)) }); err != nil {
		t.Fatalf("sync: %v", err)
	}
}
