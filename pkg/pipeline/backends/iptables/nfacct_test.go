package iptables

import (
	"maps"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/knfacct"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// acctRules returns the rules of the dump that count into an nfacct
// object, by object name.
func acctRules(fake *kiptables.Fake) map[string]int {
	got := map[string]int{}
	for _, line := range strings.Split(fake.Dump(), "\n") {
		if _, name, ok := strings.Cut(line, "--nfacct-name "); ok {
			name, _, _ = strings.Cut(name, " ")
			got[name]++
		}
	}
	return got
}

// TestNFAcctRules: with nfacct the INVALID drop and each IPv4 localhost
// node port rule count into their objects (upstreamState has three node
// ports with endpoints), which the sync created first; without it, or
// for an object that could not be created, no rule names an object (the
// restore would fail); IPv6 has no localhost node ports to count.
func TestNFAcctRules(t *testing.T) {
	for _, tc := range []struct {
		name      string
		acct      func() knfacct.Interface
		localhost bool
		want      map[string]int
	}{
		{"without nfacct", func() knfacct.Interface { return nil }, true, map[string]int{}},
		{"with nfacct", func() knfacct.Interface { return knfacct.NewFake() }, true,
			map[string]int{nfacctInvalidDropped: 1, nfacctLocalhostNodePorts: 3}},
		{"without localhost node ports", func() knfacct.Interface { return knfacct.NewFake() }, false,
			map[string]int{nfacctInvalidDropped: 1}},
		{"one object refused", func() knfacct.Interface {
			f := knfacct.NewFake()
			f.EnsureErr = map[string]error{nfacctLocalhostNodePorts: knfacct.ErrNotSupported}
			return f
		}, true, map[string]int{nfacctInvalidDropped: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acct := tc.acct()
			fake, _ := syncFake(t, withLocalhost(upstreamState(), map[bool]desired.LocalhostNodePorts{true: desired.LocalhostDNAT}[tc.localhost]), Options{NFAcct: acct})
			got := acctRules(fake)
			if !maps.Equal(got, tc.want) {
				t.Errorf("rules counting into nfacct objects: got %v, want %v", got, tc.want)
			}
			for name := range got {
				if _, err := acct.Get(name); err != nil {
					t.Errorf("a rule names %s, which the sync did not create: %v", name, err)
				}
			}
		})
	}
	st6 := caseStateWith(t, "node port on every local address by default", proxy.IPv6, localhostIPTables)
	fake6, _ := syncFake(t, st6, Options{NFAcct: knfacct.NewFake()})
	if got := acctRules(fake6); !maps.Equal(got, map[string]int{nfacctInvalidDropped: 1}) {
		t.Errorf("IPv6: rules counting into nfacct objects: %v", got)
	}
}

// TestNFAcctEnsuredOnFullSyncs: partial syncs do not ask the kernel again;
// a full sync does, so an object that could not be created at first is
// counted into once it exists, and the localhost node port still DNATs.
func TestNFAcctEnsuredOnFullSyncs(t *testing.T) {
	acct := knfacct.NewFake()
	acct.EnsureErr = map[string]error{nfacctLocalhostNodePorts: knfacct.ErrNotSupported}
	st := upstreamState()
	fake, p := syncFake(t, st, Options{NFAcct: acct})
	ensures := acct.Ensures()
	if err := p.Sync(ctx, withEndpoints(st, svcName("ns4", "svc4"), "10.180.0.4:80"), proxy.PartialSync); err != nil {
		t.Fatal(err)
	}
	if p.last.full || acct.Ensures() != ensures {
		t.Errorf("partial sync (full=%t) ensured the objects again", p.last.full)
	}
	acct.EnsureErr = nil
	full := *st
	full.Changed = nil
	if err := p.Sync(ctx, &full, proxytest.ModeOf(&full)); err != nil {
		t.Fatal(err)
	}
	if got := acctRules(fake)[nfacctLocalhostNodePorts]; got != 3 {
		t.Errorf("after a full sync with the object created: %d localhost node port rules count, want 3", got)
	}

	np := caseStateWith(t, "node port on every local address by default", proxy.IPv4, localhostIPTables)
	fake, _ = syncFake(t, np, Options{NFAcct: knfacct.NewFake()})
	w := proxytest.WorldOf(proxy.IPv4)
	lo := proxytest.Flow{Source: w.Loopback, Protocol: proxy.TCP, Dest: w.Loopback, DestPort: 30080, FromHost: true}
	if got := newTracer(t, fake, np).trace(lo); got.Verdict != proxytest.DNAT {
		t.Errorf("127.0.0.1:30080 with nfacct: got %s, want DNAT", got)
	}
}
