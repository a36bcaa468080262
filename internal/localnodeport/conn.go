package localnodeport

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// handle copies between the client and an endpoint until both directions
// are done, neither has carried data for the idle timeout, or the
// listener goes (which cuts the connection, so no goroutine outlives it).
func (l *listener) handle(ctx context.Context, client net.Conn) {
	defer client.Close() //nolint:errcheck // nothing to do about it
	ep, ok := l.pick()
	if !ok {
		return // the endpoints went since the connection was admitted
	}
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
	idle := newIdleWatch(l.clock, l.idle, func() {
		l.logger.V(4).Info("Closing an idle localhost node port connection", "port", l.port, "idleTimeout", l.idle)
		cancel()
	})
	defer idle.stop()
	var wg sync.WaitGroup
	wg.Go(func() { l.pipe(connCtx, backend, idle.reader(client)) })
	wg.Go(func() { l.pipe(connCtx, client, idle.reader(backend)) })
	wg.Wait()
}

// pipe copies src to dst, then half-closes dst so the peer sees the end of
// the stream while the other direction goes on.
func (l *listener) pipe(ctx context.Context, dst net.Conn, src io.Reader) {
	if _, err := io.Copy(dst, src); err != nil && ctx.Err() == nil {
		l.logger.V(4).Info("Proxying a localhost node port connection failed", "port", l.port, "err", err)
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// idleWatch calls onIdle once no read through its readers has returned
// data for timeout: both directions of a connection read through one
// watch, so a connection quiet one way and busy the other stays.
type idleWatch struct {
	clock    clock.WithDelayedExecution
	timeout  time.Duration
	onIdle   func()
	lastRead atomic.Int64 // the clock's Unix nanoseconds

	mu      sync.Mutex
	timer   clock.Timer
	stopped bool
}

func newIdleWatch(clk clock.WithDelayedExecution, timeout time.Duration, onIdle func()) *idleWatch {
	w := &idleWatch{clock: clk, timeout: timeout, onIdle: onIdle}
	w.touch()
	w.arm(timeout)
	return w
}

func (w *idleWatch) touch() { w.lastRead.Store(w.clock.Now().UnixNano()) }

// arm checks again after d. The check runs on a goroutine of its own: a
// clock may run timer functions while holding its lock (the fake one
// does), and the check calls the clock.
func (w *idleWatch) arm(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.timer = w.clock.AfterFunc(d, func() { go w.check() })
	}
}

func (w *idleWatch) check() {
	quiet := w.clock.Since(time.Unix(0, w.lastRead.Load()))
	if quiet >= w.timeout {
		w.onIdle()
		return
	}
	w.arm(w.timeout - quiet)
}

func (w *idleWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// reader returns r, noting each read that returns data. Copying through
// it gives up splice(2) between the two sockets: a userspace copy on
// loopback is cheap beside a connection nothing would ever close.
func (w *idleWatch) reader(r io.Reader) io.Reader { return activityReader{r: r, watch: w} }

type activityReader struct {
	r     io.Reader
	watch *idleWatch
}

func (a activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.watch.touch()
	}
	return n, err
}
