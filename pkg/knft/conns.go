package knft

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Sockets kept open between calls. Closing a NETLINK_NETFILTER socket
// makes the kernel finish nf_tables' deferred destruction of what the
// last transaction deleted (NETLINK_URELEASE → nft_rcv_nl_event →
// nf_tables_trans_destroy_flush_work, an RCU grace period and a work
// item) before close returns: when a Kernel opened and closed its sockets
// per Apply, every endpoint change (it deletes the old slot's element)
// waited in close many times longer than its own work took. So a
// Kernel keeps its sockets until Close, and closes one early only when it
// is broken or belongs to another network namespace.

// maxIdleConns is how many sockets a Kernel keeps: a read-back uses one
// plus up to maxDumpWorkers, and the canary may ask at the same time.
const maxIdleConns = 2 + maxDumpWorkers

// netnsID identifies a network namespace (the inode of its nsfs file).
type netnsID struct{ dev, ino uint64 }

// threadNetns is the network namespace of the calling thread. Sockets
// belong to the namespace of the thread that opened them; the tests and
// benchmarks run calls on threads that entered throwaway namespaces, so a
// socket is only reused in the namespace it was opened in.
func threadNetns() (netnsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return netnsID{}, fmt.Errorf("network namespace of this thread: %w", err)
	}
	return netnsID{dev: st.Dev, ino: st.Ino}, nil
}

// connPool holds a Kernel's idle sockets. It is safe for concurrent use
// (Exists may run beside Apply).
type connPool struct {
	mu     sync.Mutex
	netns  netnsID // of the sockets in idle
	idle   []*nlConn
	closed bool // by close: later calls open and close their own sockets
}

// get returns an open socket in the calling thread's network namespace,
// with a receive buffer; put hands it back.
func (p *connPool) get() (*nlConn, error) {
	ns, err := threadNetns()
	if err != nil {
		// Without /proc the namespace cannot be told: a socket for this
		// call only (put closes a socket of no known namespace).
		return p.dial(netnsID{})
	}
	p.mu.Lock()
	var stale []*nlConn
	if ns != p.netns {
		stale, p.idle, p.netns = p.idle, nil, ns
	}
	var c *nlConn
	if n := len(p.idle); n > 0 {
		c, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
	if c != nil {
		c.takeBuf()
		return c, nil
	}
	return p.dial(ns)
}

// dial opens a socket in the calling thread's namespace, ns.
func (p *connPool) dial(ns netnsID) (*nlConn, error) {
	c, err := dialNetfilter()
	if err != nil {
		return nil, err
	}
	c.netns = ns
	if err := c.setOptions(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// put keeps c for the next call, unless it is broken, of another or an
// unknown namespace than the pool's, one too many, or the pool is closed.
func (p *connPool) put(c *nlConn) {
	c.releaseBuf()
	p.mu.Lock()
	keep := !c.broken && !p.closed && c.netns == p.netns && c.netns != (netnsID{}) && len(p.idle) < maxIdleConns
	if keep {
		p.idle = append(p.idle, c)
	}
	p.mu.Unlock()
	if !keep {
		c.close()
	}
}

// close closes the idle sockets; sockets in use are closed when put back.
func (p *connPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

// setOptions prepares a socket for any use, a batch included.
func (c *nlConn) setOptions() error {
	// Errors then carry only the failing message's header, not its
	// (up to 48 KiB) payload.
	if err := unix.SetsockoptInt(c.fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		return fmt.Errorf("netlink NETLINK_CAP_ACK: %w", err)
	}
	// A reply that never comes must not hang the syncer: fail the call
	// (the socket is then broken; the next sync is full and reads the
	// table back) instead.
	tv := unix.Timeval{Sec: 60}
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("netlink SO_RCVTIMEO: %w", err)
	}
	return nil
}
