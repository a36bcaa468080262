package localapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/svcproxy/svcproxy/internal/metrics"
)

// Server serves routes on the socket until Close.
type Server struct {
	srv  *http.Server
	done chan struct{}
}

// timeouts bound how long one client holds the socket, and with it the one
// request slot (oneAtATime): a client that stops reading a dump is cut off
// by Write.
var timeouts = metrics.Timeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second,
	Write: time.Minute, Idle: 30 * time.Second}

// shutdownGrace is how long Close lets a response in progress finish.
const shutdownGrace = 2 * time.Second

// Start listens on path (see listen for the socket's modes and a stale
// socket) and serves routes there, one request at a time. routes maps
// http.ServeMux patterns to handlers; other paths answer 404.
func Start(path string, routes map[string]http.Handler) (*Server, error) {
	l, err := listen(path)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	s := &Server{srv: timeouts.NewServer(oneAtATime(mux)), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		// Serve closes l, which removes the socket, when it returns.
		_ = s.srv.Serve(l)
	}()
	return s, nil
}

// Close stops serving, lets a response in progress finish for a moment,
// and removes the socket before it returns.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	<-s.done
	return err
}

// RetryAfter is the Retry-After, in seconds, of a request refused because
// another is being served.
const RetryAfter = "1"

// oneAtATime serves one request at a time and refuses the others at once
// (503, Retry-After) instead of queueing them. A state dump is encoding work
// in proportion to every Service and endpoint of the cluster; serving dumps
// one by one bounds what requests can cost the daemon however many clients
// connect, and refusing rather than waiting keeps no goroutine or connection
// parked in the daemon: the waiting is the client's (Client.Get retries).
func oneAtATime(h http.Handler) http.Handler {
	slot := make(chan struct{}, 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slot <- struct{}{}:
			defer func() { <-slot }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", RetryAfter)
			http.Error(w, "svcproxy serves one request at a time on this socket: retry", http.StatusServiceUnavailable)
		}
	})
}
