package nftables

import (
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// tracer interprets the ruleset in a knftables.Fake for one packet. It
// knows exactly the vocabulary render emits (and fails the test on anything
// else), walks the base chains of each hook by priority, and explores every
// outcome of "numgen random": the result is the union of the possible fates.
type tracer struct {
	t     *testing.T
	table *knftables.FakeTable
	ip    string
	local []netip.Addr // what "fib ... type local" answers for
}

// pkt is one packet in flight on one exploration branch.
type pkt struct {
	src, dst netip.Addr
	proto    string
	dport    uint16
	iif      string
	mark     uint32
	dnat     bool
	masq     bool
}

// fate is how a chain (or rule) ended on one branch.
type fate int

const (
	fNext   fate = iota // rule did not match / chain fell through
	fReturn             // "return"
	fAccept             // accept or a NAT statement
	fDrop
	fReject
	fJump
	fGoto
)

type branch struct {
	p      pkt
	f      fate
	target string // for fJump / fGoto
}

func (tr *tracer) chain(name string) *knftables.FakeChain {
	c := tr.table.Chains[name]
	if c == nil {
		tr.t.Fatalf("tracer: no chain %q", name)
	}
	return c
}

// runChain runs rules from index i; the fates returned are terminal
// (accept, drop, reject) or fNext for "the chain is done, continue in the
// caller".
func (tr *tracer) runChain(name string, i int, p pkt, depth int) []branch {
	if depth > 50 {
		tr.t.Fatalf("tracer: chain recursion too deep at %q", name)
	}
	rules := tr.chain(name).Rules
	if i >= len(rules) {
		return []branch{{p: p, f: fNext}}
	}
	var out []branch
	for _, b := range tr.runRule(rules[i].Rule, p) {
		switch b.f {
		case fNext:
			out = append(out, tr.runChain(name, i+1, b.p, depth+1)...)
		case fReturn:
			out = append(out, branch{p: b.p, f: fNext})
		case fJump:
			for _, s := range tr.runChain(b.target, 0, b.p, depth+1) {
				if s.f == fNext {
					out = append(out, tr.runChain(name, i+1, s.p, depth+1)...)
				} else {
					out = append(out, s)
				}
			}
		case fGoto:
			out = append(out, tr.runChain(b.target, 0, b.p, depth+1)...)
		default:
			out = append(out, b)
		}
	}
	return out
}

// baseChains lists the base chains on hook, by priority.
func (tr *tracer) baseChains(hook knftables.BaseChainHook) []string {
	type bc struct {
		name string
		prio int
	}
	var list []bc
	for name, c := range tr.table.Chains {
		if c.Hook != nil && *c.Hook == hook {
			prio, err := knftables.ParsePriority(knftables.IPv4Family, string(*c.Priority))
			if err != nil {
				tr.t.Fatalf("tracer: chain %s priority: %v", name, err)
			}
			list = append(list, bc{name, prio})
		}
	}
	slices.SortFunc(list, func(a, b bc) int { return a.prio - b.prio })
	names := make([]string, len(list))
	for i, b := range list {
		names[i] = b.name
	}
	return names
}

// runHook passes branches through every base chain of hook; accepted and
// fall-through branches go on, dropped and rejected ones are final.
func (tr *tracer) runHook(hook knftables.BaseChainHook, in []branch) []branch {
	for _, name := range tr.baseChains(hook) {
		var next []branch
		for _, b := range in {
			if b.f == fDrop || b.f == fReject {
				next = append(next, b)
				continue
			}
			for _, r := range tr.runChain(name, 0, b.p, 0) {
				if r.f == fNext || r.f == fAccept {
					r.f = fNext
				}
				next = append(next, r)
			}
		}
		in = next
	}
	return in
}

// trace follows a flow through the hooks a real packet would take.
func (tr *tracer) trace(flow proxytest.Flow) proxytest.Result {
	p := pkt{src: flow.Source, dst: flow.Dest, proto: strings.ToLower(string(flow.Protocol)),
		dport: flow.DestPort, iif: flow.InInterface}
	bs := []branch{{p: p}}
	if flow.FromHost {
		bs = tr.runHook(knftables.OutputHook, bs)
	} else {
		bs = tr.runHook(knftables.PreroutingHook, bs)
		var input, forward []branch
		for _, b := range bs {
			if slices.Contains(tr.local, b.p.dst) {
				input = append(input, b)
			} else {
				forward = append(forward, b)
			}
		}
		bs = append(tr.runHook(knftables.InputHook, input), tr.runHook(knftables.ForwardHook, forward)...)
	}
	bs = tr.runHook(knftables.PostroutingHook, bs)
	return tr.result(bs)
}

func (tr *tracer) result(bs []branch) proxytest.Result {
	return proxytest.CombineBranches(bs, branch.end)
}

// end is where this branch ended.
func (b branch) end() proxytest.BranchEnd {
	return proxytest.BranchEnd{Dropped: b.f == fDrop, Rejected: b.f == fReject,
		DNAT: b.p.dnat, Dst: netip.AddrPortFrom(b.p.dst, b.p.dport), Masquerade: b.p.masq}
}

// tokenize splits a rule into words, keeping "{ ... }" groups and quoted
// strings as single tokens.
func tokenize(rule string) []string {
	var toks []string
	for i := 0; i < len(rule); {
		switch c := rule[i]; {
		case c == ' ':
			i++
		case c == '{':
			j := strings.IndexByte(rule[i:], '}') + i
			toks = append(toks, rule[i:j+1])
			i = j + 1
		case c == '"':
			j := strings.IndexByte(rule[i+1:], '"') + i + 1
			toks = append(toks, rule[i:j+1])
			i = j + 1
		default:
			j := strings.IndexByte(rule[i:], ' ')
			if j < 0 {
				j = len(rule) - i
			}
			toks = append(toks, rule[i:i+j])
			i += j
		}
	}
	return toks
}

// groupItems returns the items of a "{ a, b }" token.
func groupItems(tok string) []string {
	inner := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(tok, "{"), "}"))
	var out []string
	for _, s := range strings.Split(inner, ",") {
		out = append(out, strings.TrimSpace(s))
	}
	return out
}

// valueMatches compares one packet value with one nft constant: equal, a
// prefix containing it, or an interface wildcard.
func valueMatches(val, pattern string) bool {
	pattern = strings.Trim(pattern, `"`)
	if strings.HasSuffix(pattern, "*") {
		return strings.HasPrefix(val, strings.TrimSuffix(pattern, "*"))
	}
	if strings.Contains(pattern, "/") {
		pfx, err1 := netip.ParsePrefix(pattern)
		addr, err2 := netip.ParseAddr(val)
		return err1 == nil && err2 == nil && pfx.Contains(addr)
	}
	if m, ok := path.Match(pattern, val); ok == nil && m {
		return true
	}
	return val == pattern
}

func keyMatches(key []string, elemKey []string) bool {
	if len(key) != len(elemKey) {
		return false
	}
	for i := range key {
		if !valueMatches(key[i], elemKey[i]) {
			return false
		}
	}
	return true
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }
