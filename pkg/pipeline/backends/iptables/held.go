package iptables

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// HeldPorts is syncer.PortHolder: it reads nat and filter back
// (iptables-save) and reports the service ports of st whose rules the
// kernel holds as render writes them: each of the port's own chains with
// its rules in order, and each of its rules in the shared chains
// (KUBE-SERVICES, KUBE-NODEPORTS, …) somewhere in that chain. Rules are
// compared by their canonical form (ruleKey), hashed. The shared chains'
// global rules are no port's: a sync rewrites them for every port alike.
// It writes nothing. The syncer asks only after a rejected sync, so the
// normal sync pays nothing for it; it costs a save of both tables and a
// render of st.
func (p *Proxier) HeldPorts(ctx context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	if st.Family != p.family {
		return nil, fmt.Errorf("iptables %s proxier got a %s state", p.family, st.Family)
	}
	k := &keptRules{seed: maphash.MakeSeed(), v6: p.family == proxy.IPv6, chains: map[tableChain][]uint64{}}
	for _, t := range []kiptables.Table{kiptables.TableNAT, kiptables.TableFilter} {
		save, err := p.ipt.Save(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("iptables %s: reading %s back: %w", p.family, t, err)
		}
		k.read(t, save)
	}
	cfg := newConfig(st, &p.opts, countEndpoints(st) > largeClusterEndpoints, p.counters)
	r := &renderer{cfg: cfg, state: st, probs: &p.probs}
	held := map[proxy.ServicePortName]struct{}{}
	own := &lineBuffer{}
	for name, sp := range st.Services.All() {
		own.b, own.full, own.lines = own.b[:0], nil, 0
		r.chains = r.chains[:0] // the chains are read from own
		if k.holds(r.renderService(sp, own), own) {
			held[name] = struct{}{}
		}
	}
	return held, nil
}

type tableChain struct {
	table kiptables.Table
	chain string
}

// keptRules is what the kernel holds: each chain's rules, as hashes of
// their keys, in order.
type keptRules struct {
	seed   maphash.Seed
	v6     bool
	chains map[tableChain][]uint64
	// shared: the rules of the chains every port adds to, as sets.
	shared map[tableChain]map[uint64]struct{}
}

// sharedTables says which table each shared chain of an entry is in.
var sharedTables = [numShared]kiptables.Table{
	natServices: kiptables.TableNAT, natNodePorts: kiptables.TableNAT,
	filterServices: kiptables.TableFilter, filterExternal: kiptables.TableFilter,
	filterNodePorts: kiptables.TableFilter, filterFirewall: kiptables.TableFilter,
}

// read records the chains and rules of one table's iptables-save output.
func (k *keptRules) read(t kiptables.Table, save []byte) {
	eachLine(save, func(chain string) {
		if _, ok := k.chains[tableChain{t, chain}]; !ok {
			k.chains[tableChain{t, chain}] = []uint64{}
		}
	}, func(chain, rule string) {
		k.chains[tableChain{t, chain}] = append(k.chains[tableChain{t, chain}], k.hash(rule))
	})
}

// eachLine calls chain for each chain that restore input or save output
// declares, and rule for each rule, with its chain.
func eachLine(text []byte, chain func(name string), rule func(chain, rule string)) {
	for line := range bytes.Lines(text) {
		line = bytes.TrimRight(line, "\n")
		switch {
		case bytes.HasPrefix(line, []byte(":")):
			name, _, _ := bytes.Cut(line[1:], []byte(" "))
			chain(string(name))
		case bytes.HasPrefix(line, []byte("-A ")):
			name, _, _ := bytes.Cut(line[3:], []byte(" "))
			rule(string(name), string(line))
		}
	}
}

func (k *keptRules) hash(rule string) uint64 { return maphash.String(k.seed, ruleKey(rule, k.v6)) }

// holds reports whether the kernel has e's rules in the shared chains and
// the port's own chains, as rendered into own, with their rules in order.
func (k *keptRules) holds(e *entry, own *lineBuffer) bool {
	ok := true
	for s := range numShared {
		eachLine(bytes.Join(e.shared[s].bytes(), nil), func(string) {}, func(chain, rule string) {
			_, found := k.sharedSet(tableChain{sharedTables[s], chain})[k.hash(rule)]
			ok = ok && found
		})
	}
	if !ok {
		return false
	}
	rendered := map[string][]uint64{}
	eachLine(bytes.Join(own.bytes(), nil), func(chain string) { rendered[chain] = []uint64{} },
		func(chain, rule string) { rendered[chain] = append(rendered[chain], k.hash(rule)) })
	for chain, rules := range rendered {
		kept, found := k.chains[tableChain{kiptables.TableNAT, chain}]
		if !found || !slices.Equal(kept, rules) {
			return false
		}
	}
	return true
}

// sharedSet is the rules of a shared chain as a set, made at first use.
func (k *keptRules) sharedSet(tc tableChain) map[uint64]struct{} {
	if k.shared == nil {
		k.shared = map[tableChain]map[uint64]struct{}{}
	}
	set, ok := k.shared[tc]
	if !ok {
		set = make(map[uint64]struct{}, len(k.chains[tc]))
		for _, h := range k.chains[tc] {
			set[h] = struct{}{}
		}
		k.shared[tc] = set
	}
	return set
}
