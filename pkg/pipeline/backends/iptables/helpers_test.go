package iptables

import (
	"context"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// syncFake programs state into a fresh fake with opts and returns both. The
// first sync is a recovery, as the syncer's first sync is.
func syncFake(t *testing.T, state *desired.State, opts Options) (*kiptables.Fake, *Proxier) {
	t.Helper()
	fake := kiptables.NewFake()
	p := NewWithInterface(state.Family, fake, opts)
	if err := p.Sync(context.Background(), state, proxy.RecoverySync); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	return fake, p
}

// caseState builds the State of the named shared case.
func caseState(t *testing.T, name string, family proxy.IPFamily) *desired.State {
	t.Helper()
	return proxytest.BuildState(t, caseNamed(t, name), family)
}

// caseNamed finds the named shared case.
func caseNamed(t *testing.T, name string) proxytest.Case {
	t.Helper()
	for _, c := range proxytest.Cases() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %q in proxytest.Cases()", name)
	return proxytest.Case{}
}

// caseStateWith builds the named shared case's State with edit applied to
// desired's options after the case's own edits.
func caseStateWith(t *testing.T, name string, family proxy.IPFamily, edit func(*desired.Options)) *desired.State {
	t.Helper()
	c := caseNamed(t, name)
	own := c.Options
	c.Options = func(o *desired.Options) {
		if own != nil {
			own(o)
		}
		edit(o)
	}
	return proxytest.BuildState(t, c, family)
}

// localhostIPTables is upstream iptables mode's default, localhostNodePorts
// true: desired decides where IPv4 node ports answer on 127.0.0.1.
func localhostIPTables(o *desired.Options) { o.Localhost = desired.LocalhostModeDNAT }

// withLocalhost is a shallow copy of st with the localhost decision set, for
// hand-built States (desired decides it from Options otherwise).
func withLocalhost(st *desired.State, l desired.LocalhostNodePorts) *desired.State {
	out := *st
	out.NodePorts.Localhost = l
	return &out
}
