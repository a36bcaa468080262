package scenario

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// Load sends one request after another to a frontend in the background,
// each a new connection (TCP) or datagram (UDP), and counts the answers and
// the failures: what a client of the Service sees while the dataplane is
// being changed underneath it.
type Load struct {
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	answered int
	failures []string
}

// LoadResult is what a Load saw: answered requests and each failure
// (when, and the error).
type LoadResult struct {
	Answered int
	Failures []string
}

// LoadTimeout bounds each of a Load's requests unless its client says
// otherwise. It is longer than netnstest.DefaultTimeout because loads run
// beside the syncs they watch, in the IPVS test VM too (one emulated CPU on
// a shared host), where a connection that was never at risk can take
// seconds to be answered; a TCP client retransmits its SYN within it, so a
// gap of a second or two in the rules is seen by UDP (one datagram, never
// retransmitted) and by a reset or an ICMP error, not by a TCP timeout.
const LoadTimeout = 5 * time.Second

// StartLoad starts asking dst over proto from c, pausing interval between
// requests, until Stop.
func StartLoad(c netnstest.Client, proto proxy.Protocol, dst netip.AddrPort, interval time.Duration) *Load {
	if c.Timeout == 0 {
		c.Timeout = LoadTimeout
	}
	l := &Load{stop: make(chan struct{}), done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(l.done)
		for {
			_, err := c.Ask(proto, dst)
			l.mu.Lock()
			if err != nil {
				l.failures = append(l.failures, fmt.Sprintf("%s %s at %s (+%v): %v", proto, dst,
					time.Now().Format("15:04:05.000"), time.Since(start).Round(time.Millisecond), err))
			} else {
				l.answered++
			}
			l.mu.Unlock()
			select {
			case <-l.stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	return l
}

// Answered is how many requests were answered so far.
func (l *Load) Answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answered
}

// Stop ends the load after the request in flight and returns what it saw.
func (l *Load) Stop() LoadResult {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return LoadResult{Answered: l.answered, Failures: l.failures}
}
