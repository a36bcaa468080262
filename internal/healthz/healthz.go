// Package healthz serves kube-proxy's /healthz and /livez on
// healthzBindAddress (default :10256).
//
// Health is two timestamps per IP family: when an update was first queued
// and not yet synced, and when the family last synced. A family is unhealthy
// only when an update has waited longer than healthTimeout (2×syncPeriod),
// so the proxy is healthy at startup and when idle. /healthz also requires
// the node to be eligible (not missing, not being deleted, not tainted for
// deletion by the cluster autoscaler) so that cloud load balancers drain a
// departing node; /livez, meant for liveness probes, ignores the node.
package healthz

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// FamilyHealth is one IP family's health.
type FamilyHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// Health is the body of /healthz and /livez.
type Health struct {
	// LastUpdated is the most recent successful sync of any family; the
	// handlers report the current time instead when healthy, as kube-proxy
	// does for compatibility with clients that expect a recent value.
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// NodeEligible is reported by /healthz only.
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Healthy is true when every family is.
	Healthy bool                            `json:"healthy"`
	Status  map[proxy.IPFamily]FamilyHealth `json:"status,omitempty"`
}

// Server tracks proxy health and serves it. It is safe for concurrent use.
type Server struct {
	clock   clock.Clock
	timeout time.Duration

	mu            sync.Mutex
	lastUpdated   map[proxy.IPFamily]time.Time
	oldestPending map[proxy.IPFamily]time.Time
	nodeEligible  bool
}

// New returns a Server whose health timeout is 2×syncPeriod. The node counts
// as missing, hence not eligible, until SetNodeEligible says otherwise.
func New(syncPeriod time.Duration, clk clock.Clock) *Server {
	return &Server{
		clock:         clk,
		timeout:       2 * syncPeriod,
		lastUpdated:   map[proxy.IPFamily]time.Time{},
		oldestPending: map[proxy.IPFamily]time.Time{},
	}
}

// QueuedUpdate records that family has a change waiting to be synced. Only
// the oldest waiting change counts.
func (s *Server) QueuedUpdate(family proxy.IPFamily) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, set := s.oldestPending[family]; !set {
		s.oldestPending[family] = s.clock.Now()
	}
}

// Updated records that family synced successfully: nothing is pending.
func (s *Server) Updated(family proxy.IPFamily) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.oldestPending, family)
	s.lastUpdated[family] = s.clock.Now()
}

// SetNodeEligible records whether this node may receive load-balancer
// traffic (watch.Eligible: the Node exists, is not being deleted and is not
// tainted for removal). Only /healthz reports it.
func (s *Server) SetNodeEligible(eligible bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeEligible = eligible
}

// Health returns the health of every family that has synced at least once.
// A family is unhealthy when a change has been pending for healthTimeout or
// longer.
func (s *Server) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	h := Health{CurrentTime: now, Healthy: true, Status: map[proxy.IPFamily]FamilyHealth{}}
	for family, updated := range s.lastUpdated {
		if updated.After(h.LastUpdated) {
			h.LastUpdated = updated
		}
		healthy := true
		if queued, set := s.oldestPending[family]; set && now.Sub(queued) >= s.timeout {
			healthy = false
			h.Healthy = false
		}
		h.Status[family] = FamilyHealth{LastUpdated: updated, Healthy: healthy}
	}
	return h
}

// Healthy reports whether every family is healthy, ignoring the node. The
// service health servers use it for serviceProxyHealthy.
func (s *Server) Healthy() bool { return s.Health().Healthy }

func (s *Server) isNodeEligible() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodeEligible
}

// Handler serves /healthz and /livez.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := s.Health()
		eligible := s.isNodeEligible()
		h.NodeEligible = &eligible
		s.respond(w, h, h.Healthy && eligible, metrics.ProxyHealthzTotal)
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		h := s.Health()
		s.respond(w, h, h.Healthy, metrics.ProxyLivezTotal)
	})
	return mux
}

func (s *Server) respond(w http.ResponseWriter, h Health, ok bool, responses *prometheus.CounterVec) {
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
		h.LastUpdated = h.CurrentTime
	}
	responses.WithLabelValues(strconv.Itoa(code)).Inc()
	body, err := json.Marshal(h)
	if err != nil {
		klog.ErrorS(err, "Cannot encode health")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// Serve serves Handler on addr until ctx is done. A listen failure is
// retried every 5s, or, when hardFail is non-nil (bindAddressHardFail),
// reported there.
func (s *Server) Serve(ctx context.Context, addr string, hardFail chan<- error) {
	metrics.Serve(ctx, metrics.ServeOptions{
		Name: "healthz", Addr: addr, Handler: s.Handler(), Clock: s.clock, HardFail: hardFail,
	})
}
