package localnodeport

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/metrics"
)

// dialTimeout bounds the connection to an endpoint, as upstream's.
const dialTimeout = 5 * time.Second

// dialFunc opens a connection to an endpoint.
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// listener serves one node port on loopback.
type listener struct {
	port    uint16
	family  string
	logger  klog.Logger
	notices *notices
	ln      net.Listener
	cancel  context.CancelFunc
	clock   clock.WithDelayedExecution
	dial    dialFunc
	idle    time.Duration
	conns   *slots // this port's
	total   *slots // shared by the Proxy's ports

	// grace runs while the port has no endpoints (see Proxy.startGrace);
	// graceRound tells a late expiry from the current one. Both are
	// guarded by the Proxy's mutex.
	grace      clock.Timer
	graceRound int

	mu        sync.Mutex // guards the endpoint choice below
	endpoints []netip.AddrPort
	// affinity is the ClientIP affinity timeout (0: none). Every client
	// here has the same source address, so affinity pins all of this
	// port's connections to one endpoint until the pin is idle longer
	// than the timeout; each connection renews it, as the kernel's
	// affinity sets do in the nftables rules.
	affinity time.Duration
	pinned   netip.AddrPort // zero: no pin
	pinUsed  time.Time
}

func (l *listener) serve(ctx context.Context) {
	var delay time.Duration
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Any other failure (out of file descriptors, an aborted
			// handshake) must not end the listener, which Sync would
			// still count as serving; nor may it be retried at once: a
			// connection left in the backlog fails every Accept until
			// descriptors free up.
			delay = nextAcceptDelay(delay)
			l.notices.note("accept", "Accepting on a localhost node port failed; backing off",
				"port", l.port, "err", err, "retryIn", delay)
			if !l.wait(ctx, delay) {
				return
			}
			continue
		}
		delay = 0
		l.admit(ctx, conn)
	}
}

func nextAcceptDelay(previous time.Duration) time.Duration {
	if previous == 0 {
		return minAcceptDelay
	}
	return min(2*previous, maxAcceptDelay)
}

// wait sleeps for d on the listener's clock; false if ctx ended first.
func (l *listener) wait(ctx context.Context, d time.Duration) bool {
	t := l.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// admit serves conn, or resets it while the port has no endpoints or a
// connection cap is reached. Resetting at the cap, rather than leaving
// new connections in the backlog until a slot frees, is the kinder
// choice: the client learns at once, as from a refused connection,
// instead of waiting with no deadline of its own for a slot that a stuck
// or hostile client may hold until the idle timeout; and each refusal is
// counted where an operator sees it.
func (l *listener) admit(ctx context.Context, conn net.Conn) {
	if !l.hasEndpoints() {
		l.refuse(conn, metrics.RefusedNoEndpoints)
		return
	}
	if !l.conns.take() {
		l.refuse(conn, metrics.RefusedPortLimit)
		return
	}
	if !l.total.take() {
		l.conns.release()
		l.refuse(conn, metrics.RefusedLimit)
		return
	}
	go func() {
		defer l.total.release()
		defer l.conns.release()
		l.handle(ctx, conn)
	}()
}

// refuse resets conn: a reset, not an orderly close the client could take
// for an empty answer. It is counted first, so that whoever saw the reset
// finds it counted.
func (l *listener) refuse(conn net.Conn, reason string) {
	metrics.LocalhostNodePortRefusedConnectionsTotal.WithLabelValues(l.family, reason).Inc()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
	if reason == metrics.RefusedNoEndpoints {
		l.logger.V(4).Info("Reset a localhost node port connection: no endpoints", "port", l.port)
		return
	}
	l.notices.note(reason, "Localhost node port proxy at its connection cap; resetting new connections",
		"port", l.port, "reason", reason)
}

// pick chooses the endpoint of a new connection: at random, as the
// kernel rules do, or the pinned one while affinity holds and the pinned
// endpoint is still there. False when the port has no endpoints.
func (l *listener) pick() (netip.AddrPort, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.endpoints) == 0 {
		return netip.AddrPort{}, false
	}
	now := l.clock.Now()
	if l.affinity > 0 && l.pinned.IsValid() && now.Sub(l.pinUsed) <= l.affinity {
		for _, ep := range l.endpoints {
			if ep == l.pinned {
				l.pinUsed = now
				return ep, true
			}
		}
	}
	ep := l.endpoints[rand.IntN(len(l.endpoints))]
	if l.affinity > 0 {
		l.pinned, l.pinUsed = ep, now
	}
	return ep, true
}

func (l *listener) hasEndpoints() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.endpoints) > 0
}

// update takes a new sync's endpoints and affinity; a changed affinity
// drops the pin.
func (l *listener) update(spec *Spec) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endpoints = spec.Endpoints
	if l.affinity != spec.Affinity {
		l.affinity, l.pinned = spec.Affinity, netip.AddrPort{}
	}
}

// stopGrace ends the grace period, if one runs. The Proxy's mutex is held.
func (l *listener) stopGrace() {
	if l.grace != nil {
		l.grace.Stop()
		l.grace = nil
	}
}

func (l *listener) close() {
	l.stopGrace()
	l.cancel()
	_ = l.ln.Close()
}
