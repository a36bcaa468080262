package ipvs

import (
	"context"
	"fmt"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// HeldPorts is syncer.PortHolder: it reads the kernel's objects back (as a
// RecoverySync does, so a FullSync right after needs no second read) and
// reports the service ports of st whose part the kernel holds as it is:
// each virtual server with the same settings and its real servers at
// weight 1 (any other at 0, draining), each address on the dummy link and
// each ipset member. The iptables rules are no port's: a full sync
// rewrites them for every port alike. It writes nothing. The syncer asks
// only after a rejected sync, so the normal sync pays nothing for it.
func (p *Proxier) HeldPorts(_ context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	if st.Family != p.family {
		return nil, fmt.Errorf("ipvs %s proxier got a %s state", p.family, st.Family)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.store.syncs.Failed()
	if err := p.readBack(); err != nil {
		return nil, err
	}
	p.store.syncs.ReadDone()
	cfg := newRenderConfig(st)
	held := map[proxy.ServicePortName]struct{}{}
	for name, sp := range st.Services.All() {
		pt := renderService(cfg, sp)
		if cfg.err != nil {
			return nil, cfg.err
		}
		if p.store.holds(pt) {
			held[name] = struct{}{}
		}
	}
	return held, nil
}

// holds reports whether the kernel side of the store has pt as it is: a
// sync claiming pt would write nothing for it.
func (s *store) holds(pt *part) bool {
	for _, vs := range pt.vs {
		if have, ok := s.vs.Kernel(vs.svc.ServiceKey); !ok || !vs.drains(have) {
			return false // the sync would add it, or set a weight
		}
	}
	for _, a := range pt.addrs {
		if _, ok := s.addrs.Kernel(a); !ok {
			return false
		}
	}
	for _, e := range pt.entries {
		if _, ok := s.sets[e.set].Kernel(e.entry); !ok {
			return false
		}
	}
	return true
}
