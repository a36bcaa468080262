package iptables

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// tracer interprets the rules in a kiptables.Fake for one new connection,
// as upstream's iptablesTracer does: nat PREROUTING (or OUTPUT for the
// host's own traffic), then filter INPUT or FORWARD (or OUTPUT), then nat
// POSTROUTING. It knows exactly the matches and targets the backend emits
// and fails the test on anything else. "statistic" and "recent --rcheck"
// are explored both ways, so a result is the union of possible fates.
type tracer struct {
	t           *testing.T
	nat, filter *kiptables.FakeTable
	local       []netip.Addr // what "-m addrtype --*-type LOCAL" answers for
}

func newTracer(t *testing.T, fake *kiptables.Fake, state *desired.State) *tracer {
	return &tracer{t: t, nat: fake.Table(kiptables.TableNAT), filter: fake.Table(kiptables.TableFilter),
		local: proxytest.LocalAddrs(state)}
}

// pkt is the packet on one exploration branch.
type pkt struct {
	src, dst netip.Addr
	proto    string
	dport    uint16
	iif      string
	mark     uint32
	dnat     bool
	masq     bool
}

type fate int

const (
	fNext   fate = iota // no match, or the chain fell through
	fReturn             // -j RETURN
	fAccept             // ACCEPT, DNAT or MASQUERADE: this hook is done
	fDrop
	fReject
	fJump
)

type branch struct {
	p      pkt
	f      fate
	target string
}

func (tr *tracer) trace(flow proxytest.Flow) proxytest.Result {
	p := pkt{src: flow.Source, dst: flow.Dest, proto: strings.ToLower(string(flow.Protocol)),
		dport: flow.DestPort, iif: flow.InInterface}
	bs := []branch{{p: p}}
	if flow.FromHost {
		bs = tr.hook(tr.nat, kiptables.ChainOutput, bs)
		bs = tr.hook(tr.filter, kiptables.ChainOutput, bs)
		// Delivery to the host itself loops back through filter INPUT
		// (nat PREROUTING is not consulted again for the connection).
		local, remote := tr.splitLocal(bs)
		bs = append(tr.hook(tr.filter, kiptables.ChainInput, local), remote...)
	} else {
		bs = tr.hook(tr.nat, kiptables.ChainPrerouting, bs)
		input, forward := tr.splitLocal(bs)
		bs = append(tr.hook(tr.filter, kiptables.ChainInput, input), tr.hook(tr.filter, kiptables.ChainForward, forward)...)
	}
	bs = tr.hook(tr.nat, kiptables.ChainPostrouting, bs)
	return result(bs)
}

// splitLocal separates branches whose destination is this host.
func (tr *tracer) splitLocal(bs []branch) (local, remote []branch) {
	for _, b := range bs {
		if slices.Contains(tr.local, b.p.dst) {
			local = append(local, b)
		} else {
			remote = append(remote, b)
		}
	}
	return local, remote
}

// hook runs a built-in chain on every live branch; dropped and rejected
// branches stay final, the rest go on.
func (tr *tracer) hook(table *kiptables.FakeTable, chain string, in []branch) []branch {
	var out []branch
	for _, b := range in {
		if b.f == fDrop || b.f == fReject {
			out = append(out, b)
			continue
		}
		for _, r := range tr.run(table, chain, 0, b.p, 0) {
			if r.f == fAccept || r.f == fNext || r.f == fReturn {
				r.f = fNext
			}
			out = append(out, r)
		}
	}
	return out
}

// run runs chain from rule i; returned fates are terminal or fNext.
func (tr *tracer) run(table *kiptables.FakeTable, chain string, i int, p pkt, depth int) []branch {
	c := table.Chains[chain]
	if c == nil {
		tr.t.Fatalf("tracer: %s has no chain %s", table.Name, chain)
	}
	if depth > 100 {
		tr.t.Fatalf("tracer: recursion too deep in %s", chain)
	}
	if i >= len(c.Rules) {
		return []branch{{p: p, f: fNext}}
	}
	var out []branch
	for _, b := range tr.rule(c.Rules[i], p) {
		switch b.f {
		case fNext:
			out = append(out, tr.run(table, chain, i+1, b.p, depth+1)...)
		case fReturn:
			out = append(out, branch{p: b.p, f: fNext})
		case fJump:
			for _, s := range tr.run(table, b.target, 0, b.p, depth+1) {
				if s.f == fNext {
					out = append(out, tr.run(table, chain, i+1, s.p, depth+1)...)
				} else {
					out = append(out, s)
				}
			}
		default:
			out = append(out, b)
		}
	}
	return out
}

func result(bs []branch) proxytest.Result {
	return proxytest.CombineBranches(bs, branch.end)
}

// end is where this branch ended.
func (b branch) end() proxytest.BranchEnd {
	return proxytest.BranchEnd{Dropped: b.f == fDrop, Rejected: b.f == fReject,
		DNAT: b.p.dnat, Dst: netip.AddrPortFrom(b.p.dst, b.p.dport), Masquerade: b.p.masq}
}
