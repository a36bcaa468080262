package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
)

// rsKey names one real server of one virtual server.
type rsKey struct {
	vs kipvs.ServiceKey
	rs netip.AddrPort
}

// startReaper starts the background reaper once, unless disabled.
func (p *Proxier) startReaper() {
	if p.opts.ReapInterval < 0 {
		return
	}
	p.reaperOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		p.stopReaper = cancel
		go func() {
			tick := time.NewTicker(p.opts.ReapInterval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					_ = p.Reap() // errors are retried on the next tick
				}
			}
		}()
	})
}

// Close stops the background reaper.
func (p *Proxier) Close() {
	if p.stopReaper != nil {
		p.stopReaper()
	}
}

// Reap deletes terminating real servers (weight 0) whose connections are
// gone, or that have waited GracePeriod. A TCP or SCTP real server is done
// when it has no active connection (what remains are closing ones); a UDP
// one when it has no entry at all, since IPVS counts UDP flows as
// inactive. It lists the destinations of each affected virtual server
// once, so its cost grows with terminating real servers, not services.
func (p *Proxier) Reap() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	byVS := map[kipvs.ServiceKey][]rsKey{}
	for rs := range p.terminating {
		byVS[rs.vs] = append(byVS[rs.vs], rs)
	}
	var errs []error
	now := p.opts.Now()
	for k, list := range byVS {
		have, ok := p.store.vs.Kernel(k)
		if !ok {
			for _, rs := range list {
				delete(p.terminating, rs)
			}
			continue
		}
		status, err := p.c.IPVS.ListDestinations(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, rs := range list {
			if !p.reapable(k, rs, status, now) {
				continue
			}
			err := p.c.IPVS.DeleteDestination(k, rs.rs)
			if err != nil && !errors.Is(err, kipvs.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			delete(have.idle, rs.rs) // the store's own map (setServers)
			delete(p.terminating, rs)
		}
	}
	return errors.Join(errs...)
}

func (p *Proxier) reapable(k kipvs.ServiceKey, rs rsKey, status []kipvs.DestinationStatus, now time.Time) bool {
	if now.Sub(p.terminating[rs]) >= p.opts.GracePeriod {
		return true
	}
	for _, d := range status {
		if d.Addr != rs.rs {
			continue
		}
		if k.Protocol == kipvs.UDP {
			return d.ActiveConns+d.InactiveConns == 0
		}
		return d.ActiveConns == 0
	}
	return true // already gone from the kernel
}
