package nftables

import (
	"context"
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// HeldPorts is syncer.PortHolder: it reads the table back (ReadBack) and
// reports the service ports of st whose part the table holds exactly as
// render wants it: every chain with the same rules (by their comments),
// every set and map, every element with the same value, and every
// frontend's endpoints in some order of slots (assignSlots keeps the
// kernel's). A sync of those ports alone changes nothing the kernel does
// for them. The global part is left out: it is no port's, and a sync
// rewrites it for every port alike. The syncer asks only after a rejected
// sync, so the normal sync pays nothing for it; it costs a read-back and a
// render of st, and claims nothing (a FullSync after it uses the read).
func (p *Proxier) HeldPorts(ctx context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	if st.Family != p.family {
		return nil, fmt.Errorf("nftables %s proxier got a %s state", p.family, st.Family)
	}
	if err := p.ReadBack(ctx); err != nil {
		return nil, err
	}
	return p.heldPorts(st)
}

// heldPorts is HeldPorts on the store as read back.
func (p *Proxier) heldPorts(st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	cfg := newConfig(st)
	cfg.ownSlots = p.ownSlots
	held := map[proxy.ServicePortName]struct{}{}
	chains := map[*chainSpec]bool{} // shared dispatch chains: checked once
	for name, sp := range st.Services.All() {
		pt := renderService(cfg, sp)
		if cfg.err != nil {
			return nil, fmt.Errorf("rendering nftables %s: %w", p.family, cfg.err)
		}
		if p.store.holds(pt, chains) {
			held[name] = struct{}{}
		}
		cfg.scratch.recycle(pt.elems)
	}
	return held, nil
}

// holds reports whether the kernel side of the store has everything of pt
// as it is: what a sync claiming pt would leave untouched. checked keeps
// the answer for each chain asked about.
func (s *store) holds(pt *part, checked map[*chainSpec]bool) bool {
	for _, c := range pt.chains {
		ok, done := checked[c]
		if !done {
			e := s.chains[c.name]
			ok = e != nil && e.present && !hookDiffers(c, e) && slices.Equal(e.kernel, c.ruleIDs())
			checked[c] = ok
		}
		if !ok {
			return false
		}
	}
	for _, st := range pt.sets {
		if e := s.sets[st.name]; e == nil || !e.present || typeDiffers(st, e) {
			return false
		}
	}
	for _, el := range pt.elems {
		have, ok := s.kernel(s.elemKeyOf(el.set, el.key, el.slots))
		if !ok {
			return false
		}
		if el.slots {
			s.assignGroup(&el) // a copy: the kernel's order of slots
		}
		if have != el.value {
			return false
		}
	}
	return true
}
