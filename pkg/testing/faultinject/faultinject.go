// Package faultinject corrupts the rules of chosen Services on their way
// to a real backend, the way a bug in svcproxy's input normalization would,
// so that the kernel (nftables) or iptables-restore really refuses them.
// Tests use it to prove that such a Service is isolated and cannot stop a
// node from programming the others: the kernel test tier directly, the
// end-to-end suite through a binary built with -tags faultinject
// (internal/app/faultinject_on.go). Release builds never wrap a backend.
package faultinject

import (
	"context"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// PoisonPrefix names the Services the test build corrupts.
const PoisonPrefix = "kernel-poison"

// Backend is what a Proxier wraps (syncer.Proxier's methods).
type Backend interface {
	Init(ctx context.Context) error
	Sync(ctx context.Context, state *desired.State, mode proxy.SyncMode) error
	CanaryMissing(ctx context.Context) (bool, error)
	Cleanup(ctx context.Context) error
}

// Proxier hands every State to Inner, with the service ports of the
// Services Poison selects corrupted by Corrupt.
type Proxier struct {
	Backend
	Poison  func(proxy.ServiceName) bool
	Corrupt func(*desired.ServicePort)
	// Refused counts the Syncs Inner failed.
	Refused int
}

// Wrap returns a Proxier corrupting the Services named PoisonPrefix* the
// way the kernel of mode refuses.
func Wrap(b Backend, mode proxy.Mode, family proxy.IPFamily) *Proxier {
	return &Proxier{Backend: b, Corrupt: Corruption(mode, family),
		Poison: func(n proxy.ServiceName) bool { return strings.HasPrefix(n.Name, PoisonPrefix) }}
}

// Sync is part of syncer.Proxier.
func (p *Proxier) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	err := p.Backend.Sync(ctx, p.corrupted(st), mode)
	if err != nil {
		p.Refused++
	}
	return err
}

// holder is a Backend that tells which service ports the kernel holds
// (syncer.PortHolder).
type holder interface {
	HeldPorts(ctx context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error)
}

// HeldPorts is syncer.PortHolder: Inner is asked about the State as Sync
// would hand it over. A Backend that cannot tell holds nothing.
func (p *Proxier) HeldPorts(ctx context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	h, ok := p.Backend.(holder)
	if !ok {
		return nil, nil
	}
	return h.HeldPorts(ctx, p.corrupted(st))
}

// corrupted is st with the poisoned Services' ports corrupted.
func (p *Proxier) corrupted(st *desired.State) *desired.State {
	out := *st
	services := model.NewPortMapEditor(st.Services)
	for name, sp := range st.Services.All() {
		if p.Poison(name.ServiceName) {
			c := *sp
			p.Corrupt(&c)
			services.Set(name, &c)
		}
	}
	out.Services = services.Done()
	return &out
}

// Corruption is what a normalization bug could let through to mode's
// backend: nested source ranges for nftables and ebpf mode, whose rules are
// nftables' (its interval set refuses overlapping elements), an
// unprintable prefix for iptables and ipvs (iptables-restore refuses the
// line). Only ports with LB IPs (and, for iptables, endpoints) render a
// firewall, so only those are refused.
func Corruption(mode proxy.Mode, family proxy.IPFamily) func(*desired.ServicePort) {
	if mode == proxy.ModeNFTables || mode == proxy.ModeEBPF {
		outer, inner := "10.0.0.0/8", "10.1.0.0/16"
		if family == proxy.IPv6 {
			outer, inner = "fd00:99::/32", "fd00:99:1::/48"
		}
		return func(sp *desired.ServicePort) {
			sp.AllowedSources = []netip.Prefix{netip.MustParsePrefix(outer), netip.MustParsePrefix(inner)}
		}
	}
	return func(sp *desired.ServicePort) { sp.AllowedSources = []netip.Prefix{{}} }
}
