// Package servicehealth runs the healthCheckNodePort HTTP servers of
// LoadBalancer Services with externalTrafficPolicy: Local.
//
// Cloud load balancers probe these ports to learn which nodes have ready
// local endpoints: any path answers 200 with the count of ready local
// endpoints when there is at least one and the proxy itself is healthy,
// else 503, so the load balancer drains the node while existing flows go on.
package servicehealth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Server owns the health-check listeners of both IP families. It is safe
// for concurrent use.
type Server struct {
	healthy       func() bool
	onListenError func(svc proxy.ServiceName, err error)
	// listen opens a listener; tests replace it to observe addresses they
	// must not really bind (the unspecified address).
	listen func(network, address string) (net.Listener, error)
	// timeouts bound each probe connection (tests shorten them).
	timeouts metrics.Timeouts

	mu       sync.Mutex
	services map[key]*service
	// synced is, per family, what the last Sync made the listeners match
	// when every listener opened: desired hands the same list again while
	// no health check changed, and such a Sync has nothing to do.
	synced map[proxy.IPFamily]syncedChecks
}

type syncedChecks struct {
	checks []desired.HealthCheck
	addrs  []netip.Addr
}

// same reports whether checks and addrs are what the listeners already
// match: the very same list (desired never modifies one it handed out).
func (c syncedChecks) same(checks []desired.HealthCheck, addrs []netip.Addr) bool {
	return len(checks) == len(c.checks) && (len(checks) == 0 || &checks[0] == &c.checks[0]) && slices.Equal(addrs, c.addrs)
}

type key struct {
	family proxy.IPFamily
	name   proxy.ServiceName
}

// New returns a Server. healthy reports whether the proxy is healthy (the
// serviceProxyHealthy field); onListenError is called when a port cannot be
// opened, so that the caller can emit a FailedToStartServiceHealthcheck
// event on the Service.
func New(healthy func() bool, onListenError func(svc proxy.ServiceName, err error)) *Server {
	var lc net.ListenConfig
	return &Server{
		healthy:       healthy,
		onListenError: onListenError,
		listen: func(network, address string) (net.Listener, error) {
			return lc.Listen(context.Background(), network, address)
		},
		services: map[key]*service{},
		synced:   map[proxy.IPFamily]syncedChecks{},
	}
}

// Sync makes family's listeners match checks: one server per service on
// its healthCheckNodePort, on each address node ports accept (the
// unspecified address when they accept all). Servers whose port and
// addresses did not change stay open and only pick up the new endpoint
// count. A service whose port failed to open is retried on the next Sync.
func (s *Server) Sync(nodePorts desired.NodePortAddrs, family proxy.IPFamily, checks []desired.HealthCheck) {
	addrs := listenAddrs(nodePorts, family)
	failed := s.sync(family, addrs, checks)
	// Reported outside the lock: the callback may be slow (an event).
	for _, f := range failed {
		if s.onListenError != nil {
			s.onListenError(f.svc, f.err)
		}
	}
}

type failure struct {
	svc proxy.ServiceName
	err error
}

func (s *Server) sync(family proxy.IPFamily, addrs []netip.Addr, checks []desired.HealthCheck) []failure {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.synced[family]; ok && last.same(checks, addrs) {
		return nil
	}
	var failed []failure

	wanted := make(map[key]bool, len(checks))
	for _, hc := range checks {
		k := key{family, hc.Service}
		wanted[k] = true
		if svc := s.services[k]; svc != nil {
			if svc.port == hc.Port && slices.Equal(svc.addrs, addrs) {
				svc.setLocalReady(hc.LocalReady)
				continue
			}
			svc.close()
			delete(s.services, k)
		}
		svc, err := s.open(family, hc, addrs)
		if err != nil {
			klog.ErrorS(err, "Cannot start service health check", "service", hc.Service, "port", hc.Port)
			failed = append(failed, failure{hc.Service, err})
			continue
		}
		s.services[k] = svc
	}
	for k, svc := range s.services {
		if k.family == family && !wanted[k] {
			svc.close()
			delete(s.services, k)
		}
	}
	delete(s.synced, family)
	if len(failed) == 0 {
		s.synced[family] = syncedChecks{checks, addrs}
	}
	return failed
}

// Close stops every server.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, svc := range s.services {
		svc.close()
		delete(s.services, k)
	}
	clear(s.synced)
}

// listenAddrs returns where family's health checks listen.
func listenAddrs(nodePorts desired.NodePortAddrs, family proxy.IPFamily) []netip.Addr {
	if nodePorts.All {
		if family == proxy.IPv6 {
			return []netip.Addr{netip.IPv6Unspecified()}
		}
		return []netip.Addr{netip.IPv4Unspecified()}
	}
	var out []netip.Addr
	for _, ip := range nodePorts.IPs {
		if family.Contains(ip) {
			out = append(out, ip)
		}
	}
	return out
}

// open listens on every address and starts serving; on any failure it
// closes what it opened.
func (s *Server) open(family proxy.IPFamily, hc desired.HealthCheck, addrs []netip.Addr) (*service, error) {
	network := "tcp4"
	if family == proxy.IPv6 {
		network = "tcp6"
	}
	svc := &service{name: hc.Service, port: hc.Port, addrs: addrs, localReady: hc.LocalReady, healthy: s.healthy}
	svc.server = s.timeouts.NewServer(svc)
	var listeners []net.Listener
	for _, addr := range addrs {
		address := netip.AddrPortFrom(addr, hc.Port).String()
		l, err := s.listen(network, address)
		if err != nil {
			for _, open := range listeners {
				_ = open.Close()
			}
			return nil, fmt.Errorf("listen on %s for service %s health checks: %w", address, hc.Service, err)
		}
		listeners = append(listeners, l)
	}
	for _, l := range listeners {
		go func() {
			if err := svc.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "Service health check server stopped", "service", hc.Service, "address", l.Addr())
			}
		}()
	}
	return svc, nil
}

// service is the health-check server of one Service in one family.
type service struct {
	name    proxy.ServiceName
	port    uint16
	addrs   []netip.Addr
	healthy func() bool
	server  *http.Server

	mu         sync.Mutex
	localReady int
}

func (svc *service) setLocalReady(n int) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	svc.localReady = n
}

func (svc *service) close() {
	// Close, not Shutdown: probes are short and a load balancer retries.
	_ = svc.server.Close()
}

type serviceRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type body struct {
	Service             serviceRef `json:"service"`
	LocalEndpoints      int        `json:"localEndpoints"`
	ServiceProxyHealthy bool       `json:"serviceProxyHealthy"`
}

// ServeHTTP answers any path.
func (svc *service) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	svc.mu.Lock()
	n := svc.localReady
	svc.mu.Unlock()
	healthy := svc.healthy == nil || svc.healthy()

	code := http.StatusServiceUnavailable
	if n > 0 && healthy {
		code = http.StatusOK
	}
	out, err := json.Marshal(body{
		Service:             serviceRef{Namespace: svc.name.Namespace, Name: svc.name.Name},
		LocalEndpoints:      n,
		ServiceProxyHealthy: healthy,
	})
	if err != nil {
		klog.ErrorS(err, "Cannot encode service health", "service", svc.name)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(n))
	w.WriteHeader(code)
	_, _ = w.Write(out)
}
