package localnodeport

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// dialTimeout bounds the connection to an endpoint, as upstream's.
const dialTimeout = 5 * time.Second

// dialFunc opens a connection to an endpoint.
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// listener serves one node port on loopback.
type listener struct {
	port   uint16
	logger klog.Logger
	ln     net.Listener
	cancel context.CancelFunc
	clock  clock.Clock
	dial   dialFunc

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
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (EMFILE, an aborted handshake) must not
			// end the listener.
			l.logger.V(4).Info("Accept failed on localhost node port proxy", "port", l.port, "err", err)
			continue
		}
		go l.handle(ctx, conn)
	}
}

// handle copies between the client and an endpoint until both directions
// are done, or the listener goes (which cuts the connection, so no
// goroutine outlives it).
func (l *listener) handle(ctx context.Context, client net.Conn) {
	defer client.Close() //nolint:errcheck // nothing to do about it
	ep := l.pick()
	backend, err := l.dial(ctx, "tcp", ep.String())
	if err != nil {
		l.logger.V(4).Info("Connecting to the endpoint failed", "port", l.port, "endpoint", ep, "err", err)
		return
	}
	defer backend.Close() //nolint:errcheck // nothing to do about it
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-connCtx.Done()
		_ = client.Close()
		_ = backend.Close()
	}()
	var wg sync.WaitGroup
	wg.Go(func() { l.pipe(connCtx, backend, client) })
	wg.Go(func() { l.pipe(connCtx, client, backend) })
	wg.Wait()
}

// pipe copies src to dst, then half-closes dst so the peer sees the end of
// the stream while the other direction goes on.
func (l *listener) pipe(ctx context.Context, dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil && ctx.Err() == nil {
		l.logger.V(4).Info("Proxying a localhost node port connection failed", "port", l.port, "err", err)
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// pick chooses the endpoint of a new connection: at random, as the
// kernel rules do, or the pinned one while affinity holds and the pinned
// endpoint is still there.
func (l *listener) pick() netip.AddrPort {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if l.affinity > 0 && l.pinned.IsValid() && now.Sub(l.pinUsed) <= l.affinity {
		for _, ep := range l.endpoints {
			if ep == l.pinned {
				l.pinUsed = now
				return ep
			}
		}
	}
	ep := l.endpoints[rand.IntN(len(l.endpoints))]
	if l.affinity > 0 {
		l.pinned, l.pinUsed = ep, now
	}
	return ep
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

func (l *listener) close() {
	l.cancel()
	_ = l.ln.Close()
}
