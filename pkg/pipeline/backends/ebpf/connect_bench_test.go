package ebpf

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// BenchmarkKernelConnect measures what the socket hooks add to a new TCP
// connection: the same client process (in the rig's cgroup) makes
// connections, each with one request and its answer, through a ClusterIP
// the connect hook translates and directly to the endpoint, alternating,
// and times them itself. ns/conn-clusterip and ns/conn-direct are wall
// time per connection; hooks-ns/conn-* the hooks' own time per connection
// (the kernel's run-time statistics of every program: a direct connect
// runs them too, and finds no Service).
func BenchmarkKernelConnect(b *testing.B) {
	const perRun = 500
	r := newRig(b)
	r.serve(b, proxy.TCP, 8081, "ep1")
	p := r.proxier(b, proxy.IPv4)
	front := netip.AddrPortFrom(vip4, 80)
	direct := netip.AddrPortFrom(srvIP4, 8081)
	sync(b, p, stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8081)...)), proxy.RecoverySync)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	must(b, err)
	defer stats.Close()
	var wall, hooks [2]time.Duration // through the ClusterIP, direct
	for b.Loop() {
		for i, dst := range []netip.AddrPort{front, direct} {
			before := hooksRuntime(b, p)
			wall[i] += r.timeConnects(b, dst, perRun)
			hooks[i] += hooksRuntime(b, p) - before
		}
	}
	conns := float64(b.N * perRun)
	for i, kind := range []string{"clusterip", "direct"} {
		b.ReportMetric(float64(wall[i].Nanoseconds())/conns, "ns/conn-"+kind)
		b.ReportMetric(float64(hooks[i].Nanoseconds())/conns, "hooks-ns/conn-"+kind)
	}
}

// hooksRuntime is the time every program of p has run so far.
func hooksRuntime(b *testing.B, p *Proxier) time.Duration {
	var sum time.Duration
	for _, prog := range p.kernel.coll.Programs {
		s, err := prog.Stats()
		must(b, err)
		sum += s.Runtime
	}
	return sum
}

// timeConnects runs the client for count connections to dst and returns
// the time it measured for them.
func (r *rig) timeConnects(b *testing.B, dst netip.AddrPort, count int) time.Duration {
	b.Helper()
	replies := r.ask(b, "time", dst, count)
	if len(replies) != 1 || replies[0].Err != "" {
		b.Fatalf("timed client: %+v", replies)
	}
	ns, err := strconv.ParseInt(replies[0].Server, 10, 64)
	must(b, err)
	return time.Duration(ns)
}

// runTimed makes count connections to dst, one request each, and prints
// "NANOSECONDS - DST" (a reply line) or "err REASON".
func runTimed(dst string, count int) int {
	start := time.Now()
	buf := make([]byte, 64)
	for range count {
		c, err := net.DialTimeout("tcp", dst, 2*time.Second)
		if err == nil {
			_, err = exchange(c, buf)
			c.Close()
		}
		if err != nil {
			fmt.Println("err " + reason(err))
			return 0
		}
	}
	fmt.Printf("%d - %s\n", time.Since(start).Nanoseconds(), strings.TrimSpace(dst))
	return 0
}
