// Package localnodeport serves TCP node ports on loopback (127.0.0.1, ::1)
// from userspace, as upstream kube-proxy's nftables mode does behind the
// gate KubeProxyNFTablesLocalhostNodePorts (KEP-6032). nftables cannot
// DNAT a connection to loopback off the node (the packet would keep its
// 127.0.0.1 source, which the kernel refuses to route), so a listener on
// the loopback address accepts it and opens its own connection to an
// endpoint.
//
// The Proxy is driven after each successful sync (syncer.Options.AfterSync)
// from the State the backend programmed; it programs nothing in the
// kernel. UDP and SCTP node ports are not served: the nftables backend
// rejects and counts their localhost traffic.
package localnodeport

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Spec is one node port to serve on loopback.
type Spec struct {
	Name proxy.ServicePortName
	Port uint16
	// Endpoints are the endpoints node-port traffic goes to (eTP=Local:
	// this node's only).
	Endpoints []netip.AddrPort
	// Affinity is the ClientIP session affinity timeout; 0 means none.
	Affinity time.Duration
}

// Specs returns the node ports st serves on loopback: every TCP service
// port with a node port, with the endpoints its node-port traffic uses
// (External: the cluster-wide choice, or the local endpoints under
// externalTrafficPolicy: Local). A port without endpoints is listed; Sync
// gives it no new listener, so the kernel refuses its connections as
// upstream.
// Nothing is served unless desired handed the family's localhost node ports
// to this proxy (State.NodePorts.Localhost is LocalhostProxied).
func Specs(st *desired.State) []Spec {
	if st.NodePorts.Localhost != desired.LocalhostProxied {
		return nil
	}
	var out []Spec
	for _, sp := range st.Services.All() {
		if sp.NodePort == 0 || sp.Protocol != proxy.TCP {
			continue
		}
		eps := make([]netip.AddrPort, len(sp.External.Endpoints))
		for i, ep := range sp.External.Endpoints {
			eps[i] = ep.AddrPort()
		}
		out = append(out, Spec{Name: sp.Name, Port: sp.NodePort, Endpoints: eps,
			Affinity: time.Duration(sp.AffinitySeconds) * time.Second})
	}
	return out
}

// Proxy runs the loopback listeners of one IP family.
type Proxy struct {
	ctx     context.Context
	logger  klog.Logger
	notices *notices
	family  proxy.IPFamily
	addr    netip.Addr
	clock   clock.WithDelayedExecution
	opts    Options
	total   *slots // connections over all ports
	// listen and dial open the proxy's sockets; tests replace them to
	// open them in a network namespace of their own.
	listen func(network, address string) (net.Listener, error)
	dial   dialFunc

	mu     sync.Mutex // guards active against Sync and Close at once
	active map[uint16]*listener
}

// New returns the Proxy of family, bounded by opts; its listeners and
// connections end with ctx or Close.
func New(ctx context.Context, family proxy.IPFamily, opts Options) *Proxy {
	return newProxy(ctx, family, clock.RealClock{}, opts)
}

func newProxy(ctx context.Context, family proxy.IPFamily, clk clock.WithDelayedExecution, opts Options) *Proxy {
	addr := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if family == proxy.IPv6 {
		addr = netip.IPv6Loopback()
	}
	opts = opts.withDefaults()
	d := &net.Dialer{Timeout: dialTimeout}
	logger := klog.FromContext(ctx)
	return &Proxy{ctx: ctx, logger: logger, notices: newNotices(logger, clk), family: family, addr: addr,
		clock: clk, opts: opts, total: &slots{max: int64(opts.MaxConnections)},
		listen: net.Listen, dial: d.DialContext, active: map[uint16]*listener{}}
}

// Observe fits syncer.Options.AfterSync: it serves the node ports of the
// State just programmed.
func (p *Proxy) Observe(st *desired.State, _ model.Changes) {
	if st == nil || st.Family != p.family {
		return
	}
	p.Sync(Specs(st))
}

// Sync makes the listeners match specs: a node port with endpoints gets a
// listener (kept across syncs, its endpoints updated in place so open
// connections are not cut); a port no longer listed loses its listener at
// once; a port whose endpoints all went keeps its listener and its open
// connections for the grace period (Options.EmptyGrace), resetting new
// connections, and loses it if the endpoints are still gone then. A port
// that cannot be bound is logged, counted and tried again at the next Sync.
func (p *Proxy) Sync(specs []Spec) {
	listed := make(map[uint16]*Spec, len(specs))
	for i := range specs {
		listed[specs[i].Port] = &specs[i]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, l := range p.active {
		spec, ok := listed[port]
		switch {
		case !ok:
			p.logger.V(2).Info("Removing localhost node port proxy", "port", port, "ipFamily", p.family)
			p.remove(port, l)
		case len(spec.Endpoints) == 0:
			l.update(spec)
			p.startGrace(port, l)
		default:
			l.stopGrace()
			l.update(spec)
		}
	}
	for port, spec := range listed {
		if _, ok := p.active[port]; ok || len(spec.Endpoints) == 0 {
			continue
		}
		l, err := p.serve(spec)
		if err != nil {
			p.logger.Error(err, "Failed to create localhost node port proxy", "service", spec.Name, "port", port)
			metrics.LocalhostNodePortListenerCreationFailuresTotal.WithLabelValues(string(p.family)).Inc()
			continue
		}
		p.active[port] = l
		p.logger.V(4).Info("Created localhost node port proxy", "service", spec.Name, "port", port, "endpoints", len(spec.Endpoints))
	}
	p.countListeners()
}

// startGrace removes l once the grace period ends unless its endpoints
// come back first (Sync then stops it). p.mu is held.
func (p *Proxy) startGrace(port uint16, l *listener) {
	if l.grace != nil {
		return
	}
	l.graceRound++
	round := l.graceRound
	// On its own goroutine: a clock may run timer functions while holding
	// its lock, and removing the listener stops the timer.
	l.grace = p.clock.AfterFunc(p.opts.EmptyGrace, func() { go p.endGrace(port, l, round) })
}

func (p *Proxy) endGrace(port uint16, l *listener, round int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active[port] != l || l.grace == nil || l.graceRound != round {
		return // endpoints came back, or the listener went, meanwhile
	}
	p.logger.V(2).Info("Removing localhost node port proxy: no endpoints after the grace period",
		"port", port, "ipFamily", p.family, "grace", p.opts.EmptyGrace)
	p.remove(port, l)
	p.countListeners()
}

// remove closes l, cutting its connections. p.mu is held.
func (p *Proxy) remove(port uint16, l *listener) {
	l.close()
	delete(p.active, port)
}

func (p *Proxy) countListeners() {
	metrics.LocalhostNodePortListeners.WithLabelValues(string(p.family)).Set(float64(len(p.active)))
}

// Close stops every listener and cuts their connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, l := range p.active {
		p.remove(port, l)
	}
	p.countListeners()
}

// Ports returns the node ports that have a listener, for tests and logs.
func (p *Proxy) Ports() []uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]uint16, 0, len(p.active))
	for port := range p.active {
		out = append(out, port)
	}
	return out
}

func (p *Proxy) serve(spec *Spec) (*listener, error) {
	addr := net.JoinHostPort(p.addr.String(), strconv.Itoa(int(spec.Port)))
	ln, err := p.listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(p.ctx)
	l := &listener{port: spec.Port, family: string(p.family), logger: p.logger, notices: p.notices,
		ln: ln, cancel: cancel, clock: p.clock, dial: p.dial, idle: p.opts.IdleTimeout,
		conns: &slots{max: int64(p.opts.MaxConnectionsPerPort)}, total: p.total,
		endpoints: spec.Endpoints, affinity: spec.Affinity}
	go l.serve(ctx)
	return l, nil
}
