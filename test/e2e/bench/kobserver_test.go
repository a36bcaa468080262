//go:build benche2e

package bench

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// kernelObserver listens, in the node's namespace, to the kernel's
// nf_tables notifications (the netlink multicast group `nft monitor`
// reads): the kernel's own account of every change, whoever made it. Each
// message is stamped when it is read. It counts the changes (every
// message but the end of a transaction) and the transactions (NEWGEN),
// and keeps the first time each watched IPv4 address appeared in a new
// set element: the moment an endpoint written through the API was live in
// the kernel. (nft monitor itself printed nothing at 10k × 10: it loads
// the whole ruleset before it decodes a notification.)
//
// A listener makes the kernel build a notification per change, so the
// observer does not run during the cold start (100k+ elements), only
// during the churn and the restart. And it must be gone when stop
// returns: the kernel asks whether the group has a listener in any
// namespace (netlink_has_listeners reads one mask per protocol), so a
// socket left open in a deleted node namespace made every later run's
// cold start build a notification per element, about twice the cold
// sync's time (docs/performance.md, "One trap"), so the first run of
// every invocation was the fastest.
type kernelObserver struct {
	fd       int
	done     chan struct{}
	stopping atomic.Bool
	log      *os.File

	mu           sync.Mutex
	changes      int
	transactions int
	firstSeen    map[netip.Addr]time.Time
	watched      map[netip.Addr]struct{}
	readErr      error
	// overflowed: the socket's buffer overflowed (ENOBUFS) at least once,
	// so changes and transactions are lower bounds.
	overflowed bool
}

// nf_tables netlink constants (linux/netfilter/nfnetlink.h, nf_tables.h).
const (
	nfnlgrpNftables   = 7
	nfnlSubsysNftable = 10
	nftMsgNewSetElem  = 12
	nftMsgNewGen      = 16
)

// observerPoll is how often a reader with nothing to read looks whether
// it was stopped.
const observerPoll = 100 * time.Millisecond

// observe starts a kernel observer (its log in c.Work/name); the caller
// defers the returned stop, which fails t if the socket failed; lost
// notifications only make the counts lower bounds (counts says so).
func observe(t *testing.T, c *F.Cluster, n *F.Node, name string, watched []netip.Addr) (*kernelObserver, func()) {
	obs, err := startKernelObserver(n.NS, filepath.Join(c.Work, name), watched)
	if err != nil {
		t.Fatalf("kernel observer: %v", err)
	}
	return obs, func() {
		if err := obs.stop(); err != nil {
			t.Errorf("kernel observer: %v", err)
		}
	}
}

// startKernelObserver subscribes in namespace ns; a summary line per
// message goes to logPath.
func startKernelObserver(ns, logPath string, watched []netip.Addr) (*kernelObserver, error) {
	fd, err := socketIn(ns)
	if err != nil {
		return nil, err
	}
	log, err := os.Create(logPath)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	o := &kernelObserver{fd: fd, done: make(chan struct{}), log: log,
		firstSeen: map[netip.Addr]time.Time{}, watched: map[netip.Addr]struct{}{}}
	for _, a := range watched {
		o.watched[a] = struct{}{}
	}
	go o.read()
	return o, nil
}

// socketIn opens a NETLINK_NETFILTER socket inside ns, subscribed to the
// nf_tables group, with a large receive buffer.
func socketIn(ns string) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread goes back to its own namespace before it is unlocked:
		// a thread left in the node's (the main thread cannot be ended)
		// would make the whole test binary a process of that namespace,
		// which the cluster's teardown kills.
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, err}
			return
		}
		defer orig.Close()
		fd, err := socketOnThread(ns)
		if rerr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); rerr != nil {
			ch <- result{fd, fmt.Errorf("leaving %s: %w", ns, rerr)} // thread stays locked: it dies
			return
		}
		runtime.UnlockOSThread()
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		if r.fd >= 0 {
			unix.Close(r.fd)
		}
		return -1, fmt.Errorf("nf_tables netlink socket in %s: %w", ns, r.err)
	}
	return r.fd, nil
}

// socketOnThread enters ns on this (locked) thread and opens the socket
// there; the socket stays in ns.
func socketOnThread(ns string) (int, error) {
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return -1, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("entering %s: %w", ns, err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	// A reader blocked in recvfrom keeps the socket alive past close (and
	// netlink has no shutdown): it wakes up this often to see stop.
	tv := unix.NsecToTimeval(int64(observerPoll))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fd, err
	}
	err = unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (nfnlgrpNftables - 1)})
	return fd, err
}

func (o *kernelObserver) read() {
	defer close(o.done)
	buf := make([]byte, 1<<20)
	for {
		n, _, err := unix.Recvfrom(o.fd, buf, 0)
		now := time.Now()
		if err != nil {
			switch {
			case errors.Is(err, unix.EAGAIN) && o.stopping.Load():
				return // the queue is drained
			case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			case errors.Is(err, unix.ENOBUFS):
				// The kernel dropped notifications (iptables-nft
				// rewriting 10k Services' rules sends ~80k): the
				// counts from here on are lower bounds; keep reading.
				o.mu.Lock()
				o.overflowed = true
				o.mu.Unlock()
			default:
				o.mu.Lock()
				o.readErr = err
				o.mu.Unlock()
				return
			}
			continue
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			o.note(now, m)
		}
	}
}

// note counts one message and, for a new set element, looks for the
// watched addresses in its bytes (network order).
func (o *kernelObserver) note(now time.Time, m syscall.NetlinkMessage) {
	subsys, typ := m.Header.Type>>8, m.Header.Type&0xff
	if subsys != nfnlSubsysNftable {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if typ == nftMsgNewGen {
		o.transactions++
		fmt.Fprintf(o.log, "%s generation\n", now.Format("15:04:05.000000"))
		return
	}
	o.changes++
	fmt.Fprintf(o.log, "%s type %d len %d\n", now.Format("15:04:05.000000"), typ, len(m.Data))
	if typ != nftMsgNewSetElem {
		return
	}
	for i := 0; i+4 <= len(m.Data); i++ {
		a := netip.AddrFrom4([4]byte(m.Data[i : i+4]))
		if _, ok := o.watched[a]; !ok {
			continue
		}
		if _, seen := o.firstSeen[a]; !seen {
			o.firstSeen[a] = now
		}
	}
}

// counts returns the changes and transactions seen so far, and whether
// notifications were lost (then both are lower bounds).
func (o *kernelObserver) counts() (changes, transactions int, overflowed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changes, o.transactions, o.overflowed
}

// seen returns when a first appeared in a new set element.
func (o *kernelObserver) seen(a netip.Addr) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.firstSeen[a]
	return t, ok
}

// stop leaves the group, lets the reader drain what is queued and closes
// the socket once the reader is out of recvfrom; it returns a read error
// other than a lost notification (counts reports those), or that the
// reader did not finish: a listener must not outlive its phase.
func (o *kernelObserver) stop() error {
	o.stopping.Store(true)
	leaveErr := unix.SetsockoptInt(o.fd, unix.SOL_NETLINK, unix.NETLINK_DROP_MEMBERSHIP, nfnlgrpNftables)
	var stuck error
	select {
	case <-o.done:
		unix.Close(o.fd)
	case <-time.After(50 * observerPoll): // draining a full buffer takes a while
		stuck = fmt.Errorf("the reader is still in recvfrom %v after stop: its socket stays open", 50*observerPoll)
	}
	o.log.Close()
	o.mu.Lock()
	defer o.mu.Unlock()
	return errors.Join(leaveErr, stuck, o.readErr)
}

// cpuSeconds is the CPU time (user + system) of pid and of its children it
// has waited for (nft, iptables-restore), from /proc/PID/stat.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 … cstime 17.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var ticks float64
	for _, i := range []int{14, 15, 16, 17} {
		v, _ := strconv.ParseFloat(f[i-3], 64)
		ticks += v
	}
	return ticks / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100
