package localnodeport

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults of Options. The proxy serves whatever local process connects,
// so each bound keeps one client from taking what the node needs to keep
// following the cluster.
const (
	// DefaultMaxConnections is the most connections one Proxy (one IP
	// family) proxies at once; lowered further by the process's file
	// descriptor limit (defaultMaxConnections).
	DefaultMaxConnections = 4096
	// DefaultMaxConnectionsPerPort leaves three quarters of the total to
	// the other ports when one port is flooded.
	DefaultMaxConnectionsPerPort = 1024
	// DefaultIdleTimeout is Envoy's TCP proxy idle timeout: long enough
	// for quiet database and watch connections, short enough that
	// connections whose peers vanished do not pile up for the days a
	// conntrack entry would keep them.
	DefaultIdleTimeout = time.Hour
	// DefaultEmptyGrace is the default terminationGracePeriodSeconds: a
	// pod leaving the endpoints may keep serving its open connections for
	// that long, and an endpoint set that is empty only between two
	// syncs (a single replica restarting, a slice replaced) should not
	// cut the connections through this port.
	DefaultEmptyGrace = 30 * time.Second
)

// Accept backoff, as net/http's Server: a failing Accept (out of file
// descriptors: the connection stays in the backlog, so the next Accept
// fails at once) waits 5 ms, doubling to 1 s, instead of spinning on a core.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// noticeInterval spaces the log lines of a recurring condition (accept
// failures, a cap reached) so a flood cannot flood the log too.
const noticeInterval = 30 * time.Second

// Options bound what a Proxy holds open; a zero field takes its default.
type Options struct {
	// MaxConnections caps the connections proxied at once over all ports
	// of the Proxy.
	MaxConnections int
	// MaxConnectionsPerPort caps one node port's connections.
	MaxConnectionsPerPort int
	// IdleTimeout closes a connection when neither direction has carried
	// data for this long.
	IdleTimeout time.Duration
	// EmptyGrace keeps the listener of a port whose endpoints all went
	// away, and its open connections, this long; new connections meanwhile
	// are reset.
	EmptyGrace time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxConnections <= 0 {
		o.MaxConnections = defaultMaxConnections()
	}
	if o.MaxConnectionsPerPort <= 0 {
		o.MaxConnectionsPerPort = min(DefaultMaxConnectionsPerPort, o.MaxConnections)
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.EmptyGrace <= 0 {
		o.EmptyGrace = DefaultEmptyGrace
	}
	return o
}

// defaultMaxConnections is DefaultMaxConnections, or less where the file
// descriptor limit is low: each connection holds two descriptors, and the
// proxies of both families together keep to half the limit, so the
// syncer's nft/iptables runs, the informers and the metrics server still
// get theirs when every slot is taken.
func defaultMaxConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return DefaultMaxConnections
	}
	return int(max(1, min(lim.Cur/8, DefaultMaxConnections)))
}

// slots counts connections against a cap.
type slots struct {
	used atomic.Int64
	max  int64
}

// take claims a slot; false when all are in use.
func (s *slots) take() bool {
	if s.used.Add(1) > s.max {
		s.used.Add(-1)
		return false
	}
	return true
}

func (s *slots) release() { s.used.Add(-1) }

// notices logs a recurring condition once per noticeInterval and kind,
// with how often it happened since the previous line.
type notices struct {
	logger klog.Logger
	clock  clock.PassiveClock

	mu     sync.Mutex
	last   map[string]time.Time
	missed map[string]int
}

func newNotices(logger klog.Logger, clk clock.PassiveClock) *notices {
	return &notices{logger: logger, clock: clk, last: map[string]time.Time{}, missed: map[string]int{}}
}

// note logs msg unless a line of the same kind went out less than
// noticeInterval ago.
func (n *notices) note(kind, msg string, keysAndValues ...any) {
	n.mu.Lock()
	now := n.clock.Now()
	if last, ok := n.last[kind]; ok && now.Sub(last) < noticeInterval {
		n.missed[kind]++
		n.mu.Unlock()
		return
	}
	missed := n.missed[kind]
	n.last[kind], n.missed[kind] = now, 0
	n.mu.Unlock()
	n.logger.Info(msg, append(keysAndValues, "repeatsSinceLastLine", missed)...)
}
