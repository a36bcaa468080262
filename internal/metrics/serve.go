package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ListenRetryInterval is how long Serve waits before listening again after
// a failure, as kube-proxy does for its metrics and health servers.
const ListenRetryInterval = 5 * time.Second

// ServeOptions configures Serve. It is shared by the metrics server and
// the :10256 health server.
type ServeOptions struct {
	// Name appears in logs and errors ("metrics", "healthz").
	Name    string
	Addr    string
	Handler http.Handler
	// Clock paces the retries; nil means the real clock.
	Clock clock.Clock
	// HardFail, when non-nil, receives the first listen or serve error
	// (bindAddressHardFail) and Serve then returns instead of retrying.
	HardFail chan<- error
	// Timeouts bound each connection; zero means ServerTimeouts.
	Timeouts Timeouts
}

// Timeouts bound how long one client connection may hold a server's
// goroutine and socket: without Idle (and Read, which Go uses in its
// place) a keep-alive connection that never sends its next request is
// kept for ever, so anything that can reach the port can exhaust the
// daemon's file descriptors with idle connections.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers (slowloris).
	ReadHeader time.Duration
	// Read bounds reading a whole request.
	Read time.Duration
	// Write bounds writing a response, from the end of its request's headers.
	Write time.Duration
	// Idle bounds the wait for the next request on a keep-alive connection.
	Idle time.Duration
}

// ServerTimeouts are generous for scrapes and probes, which send a bodiless
// GET and get a small answer within milliseconds. Write is 2 minutes
// because pprof's profile and trace handlers refuse a duration at or beyond
// the server's WriteTimeout: the default 30 s profile still fits.
var ServerTimeouts = Timeouts{
	ReadHeader: 10 * time.Second,
	Read:       30 * time.Second,
	Write:      2 * time.Minute,
	Idle:       90 * time.Second,
}

// NewServer returns an http.Server for handler with the timeouts t (each
// zero one taken from ServerTimeouts).
func (t Timeouts) NewServer(handler http.Handler) *http.Server {
	d := ServerTimeouts
	pick := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: pick(t.ReadHeader, d.ReadHeader),
		ReadTimeout:       pick(t.Read, d.Read),
		WriteTimeout:      pick(t.Write, d.Write),
		IdleTimeout:       pick(t.Idle, d.Idle),
	}
}

// Serve listens on o.Addr and serves o.Handler until ctx is done. A failure
// to listen or serve is retried every ListenRetryInterval, or reported on
// o.HardFail.
func Serve(ctx context.Context, o ServeOptions) {
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	for {
		err := serveOnce(ctx, o)
		if ctx.Err() != nil {
			return
		}
		if o.HardFail != nil {
			select {
			case o.HardFail <- fmt.Errorf("%s server on %s: %w", o.Name, o.Addr, err):
			case <-ctx.Done():
			}
			return
		}
		klog.ErrorS(err, "Server failed; will retry", "server", o.Name, "address", o.Addr, "retryInterval", ListenRetryInterval)
		select {
		case <-ctx.Done():
			return
		case <-clk.After(ListenRetryInterval):
		}
	}
}

// serveOnce listens and serves until the server fails or ctx is done.
func serveOnce(ctx context.Context, o ServeOptions) error {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := o.Timeouts.NewServer(o.Handler)
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdownCtx)
		case <-stopped:
		}
	}()
	err = srv.Serve(l)
	close(stopped)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve: %w", err)
}
