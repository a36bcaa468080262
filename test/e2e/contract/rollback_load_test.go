package contract

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// loadInterval is the pause between two connections of one stream: with a
// stream per Service frontend, several new connections every 10 ms.
const loadInterval = 10 * time.Millisecond

// minPerSwitch is the fewest connections a stream must have opened over a
// switch for its "no failure" to mean something.
const minPerSwitch = 50

// switchLoad opens new TCP connections (an HTTP request each) to every
// frontend of the Services programmed before the switches, one stream per
// frontend from the client that asks it, and counts the failures between
// two switches.
type switchLoad struct {
	c       *F.Cluster
	n       *F.Node
	streams []*loadStream
	t0      time.Time
	// since is when the switch being counted began, relative to t0.
	since time.Duration
}

// loadStream is one frontend's stream.
type loadStream struct {
	svc  rollbackService
	load *F.Load
	seen int // results counted before
}

// startSwitchLoad starts a stream to each frontend of services.
func startSwitchLoad(t *testing.T, c *F.Cluster, n *F.Node, services []rollbackService) *switchLoad {
	t.Helper()
	l := &switchLoad{c: c, n: n, t0: time.Now()}
	for _, s := range services {
		l.streams = append(l.streams, &loadStream{svc: s, load: c.StartLoad(s.from, s.target, loadInterval, false)})
	}
	t.Logf("load: %d streams of new TCP connections, one every %v each, to %s", len(l.streams), loadInterval, l.targets())
	if os.Getenv("E2E_CONNTRACK_EVENTS") != "" {
		recordConntrackEvents(t, c, n)
	}
	return l
}

// recordConntrackEvents writes the node's conntrack events to the
// cluster's logs until the test ends: with the failed connections' local
// addresses, they show what the kernel did with a lost connection. Off by
// default: it costs CPU the load competes for.
func recordConntrackEvents(t *testing.T, c *F.Cluster, n *F.Node) {
	t.Helper()
	path := filepath.Join(c.Work, "logs", "conntrack-"+n.Name+".log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.NS, "conntrack", "-E", "-o", "timestamp,id", "-p", "tcp")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
	})
	t.Logf("conntrack events of %s in %s", n.Name, path)
}

func (l *switchLoad) targets() string {
	var ts []string
	for _, s := range l.streams {
		ts = append(ts, fmt.Sprintf("%s %s", s.svc.svc.Name, s.svc.target.Addr))
	}
	return strings.Join(ts, ", ")
}

// mark notes that a switch begins now.
func (l *switchLoad) mark() { l.since = time.Since(l.t0) }

// expectNoFailure fails the test for each connection that failed, or was
// answered by a pod other than its Service's, since the last count; it
// also fails when a stream opened too few connections to tell.
func (l *switchLoad) expectNoFailure(t *testing.T, what string) {
	t.Helper()
	counts, total, failed := l.tally()
	for _, c := range counts {
		if c.n < minPerSwitch {
			t.Errorf("%s: load to %s: only %d connections over the switch", what, c.s, c.n)
		}
		if len(c.bad) > 0 {
			t.Errorf("%s: load to %s: %d of %d connections failed (switch began at %d ms), first: %s",
				what, c.s, len(c.bad), c.n, l.since.Milliseconds(), strings.Join(first(c.bad, 5), "; "))
		}
	}
	if failed > 0 {
		l.diagnose(t)
	}
	d := time.Since(l.t0) - l.since
	t.Logf("%s: load: %d connections over the switch (%v, %.1f per 10 ms), %d failed",
		what, total, d.Round(time.Millisecond), float64(total)/float64(d/(10*time.Millisecond)), failed)
}

// expectOutage fails the test unless every stream saw a failed connection
// since the last count: what happens while the rules are gone.
func (l *switchLoad) expectOutage(t *testing.T, what string) {
	t.Helper()
	counts, total, failed := l.tally()
	for _, c := range counts {
		if len(c.bad) == 0 {
			t.Errorf("%s: load to %s: no failed connection among %d while the rules were gone "+
				"(switch began at %d ms; requests ended %d–%d ms, longest pause %d ms)",
				what, c.s, c.n, l.since.Milliseconds(), c.firstMS, c.lastMS, c.longestPause)
		}
	}
	t.Logf("%s: load (rules deleted before the start): %d connections, %d failed", what, total, failed)
}

// streamCount is one stream's connections since the last count.
type streamCount struct {
	s   *loadStream
	n   int
	bad []string // the failed ones
	// firstMS and lastMS are when the first and the last of them ended,
	// longestPause the most time between two of them (ms since the load began).
	firstMS, lastMS, longestPause int64
}

// tally counts every stream's connections since the last count.
func (l *switchLoad) tally() (counts []streamCount, total, failed int) {
	for _, s := range l.streams {
		rs := s.load.Snapshot()
		from := min(s.seen, len(rs))
		s.seen = len(rs)
		c := streamCount{s: s, n: len(rs) - from, bad: failures(rs[from:], s.svc.pod)}
		c.firstMS, c.lastMS, c.longestPause = timeline(rs[from:])
		counts = append(counts, c)
		total += c.n
		failed += len(c.bad)
	}
	return counts, total, failed
}

// stop ends the streams; connections after the last count must not fail.
func (l *switchLoad) stop(t *testing.T) {
	t.Helper()
	failed := false
	for _, s := range l.streams {
		rs := s.load.Stop()
		if bad := failures(rs[min(s.seen, len(rs)):], s.svc.pod); len(bad) > 0 {
			failed = true
			t.Errorf("load to %s after the last switch (began at %d ms): %d connections failed, first: %s",
				s, l.since.Milliseconds(), len(bad), strings.Join(first(bad, 5), "; "))
		}
	}
	if failed {
		l.diagnose(t)
	}
}

// diagnose logs, for whoever reads a failure, the kernel's counters that
// tell a dropped packet from a slow process: the node's conntrack
// statistics and the clients' TCP counters.
func (l *switchLoad) diagnose(t *testing.T) {
	t.Helper()
	if out, err := l.c.Exec(l.n, "conntrack", "-S"); err == nil {
		t.Logf("conntrack -S on %s:\n%s", l.n.Name, out)
	}
	for _, from := range []string{"cli1", "ext"} {
		out, err := F.InNS(t.Context(), l.c.NS(from), "nstat", "-asz", "TcpExtTCPSynRetrans", "TcpRetransSegs",
			"TcpAttemptFails", "TcpExtTCPTimeouts", "TcpExtTW")
		if err == nil {
			t.Logf("nstat in %s:\n%s", from, out)
		}
	}
}

// String names the stream's Service and frontend.
func (s *loadStream) String() string { return fmt.Sprintf("%s (%s)", s.svc.svc.Name, s.svc.target) }

// failures are the results that are not an answer from pod, spelled with
// the time they ended (ms since the stream began).
func failures(rs []F.Result, pod string) []string {
	var out []string
	for _, r := range rs {
		if !r.OK || r.Pod != pod {
			out = append(out, fmt.Sprintf("%d ms %s", r.MS, r))
		}
	}
	return out
}

// timeline is when the first and the last of rs ended and the longest
// pause between two of them, in ms since the load began.
func timeline(rs []F.Result) (firstMS, lastMS, longestPause int64) {
	for i, r := range rs {
		if i > 0 {
			longestPause = max(longestPause, r.MS-rs[i-1].MS)
		}
	}
	if len(rs) > 0 {
		firstMS, lastMS = rs[0].MS, rs[len(rs)-1].MS
	}
	return firstMS, lastMS, longestPause
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }
