package framework

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Target is what a client talks to: HTTP over TCP (a new connection per
// request) or UDP.
type Target struct {
	Proto string // "tcp" or "udp"
	Addr  string // ip:port
}

// TCP and UDP take an address of either family.
func TCP(ip string, port int32) Target { return Target{"tcp", hostPort(ip, port)} }
func UDP(ip string, port int32) Target { return Target{"udp", hostPort(ip, port)} }

func hostPort(ip string, port int32) string {
	return net.JoinHostPort(ip, strconv.Itoa(int(port)))
}

func (t Target) String() string { return t.Proto + "://" + t.Addr }

func (t Target) args() []string {
	if t.Proto == "udp" {
		return []string{"-udp", t.Addr}
	}
	return []string{"-url", "http://" + t.Addr + "/"}
}

// Result is one request's outcome as e2ectl ask prints it.
type Result struct {
	MS   int64
	OK   bool
	Pod  string // who answered
	Src  string // the client address the pod saw
	Kind string // refused, timeout, unreachable, other
	Msg  string
}

func (r Result) String() string {
	if r.OK {
		return r.Pod + "(" + r.Src + ")"
	}
	return r.Kind + ": " + r.Msg
}

func parseResults(out string) []Result {
	var rs []Result
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) < 3 {
			continue
		}
		ms, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		r := Result{MS: ms, OK: f[1] == "ok"}
		if r.OK {
			r.Pod = f[2]
			if len(f) > 3 {
				r.Src = f[3]
			}
		} else {
			r.Kind = f[2]
			if len(f) > 3 {
				r.Msg = f[3]
			}
		}
		rs = append(rs, r)
	}
	return rs
}

// Ask sends n requests from namespace role `from` and returns the outcomes.
func (c *Cluster) Ask(from string, t Target, n int, timeout time.Duration) []Result {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n+2)*(timeout+time.Second))
	defer cancel()
	args := append([]string{"ask", "-n", strconv.Itoa(n), "-timeout", timeout.String()}, t.args()...)
	argv := c.InCgroup(from, append([]string{c.Bins.E2ECtl}, args...))
	out, err := InNS(ctx, c.NS(from), argv[0], argv[1:]...)
	if err != nil {
		c.T.Fatalf("e2ectl ask from %s to %s: %v", from, t, err)
	}
	return parseResults(string(out))
}

// Check is a predicate over one round of results; nil means satisfied.
type Check func([]Result) error

// Eventually asks rounds of n requests until check passes or limit ends,
// and returns the last error. Rules take a sync to land, so every
// assertion about traffic after an API change goes through here.
func (c *Cluster) Eventually(from string, t Target, n int, limit time.Duration, check Check) error {
	c.T.Helper()
	return c.EventuallyWithin(from, t, n, time.Second, limit, check)
}

// EventuallyWithin is Eventually with a per-request timeout other than 1 s.
func (c *Cluster) EventuallyWithin(from string, t Target, n int, timeout, limit time.Duration, check Check) error {
	c.T.Helper()
	deadline := time.Now().Add(limit)
	for {
		rs := c.Ask(from, t, n, timeout)
		err := check(rs)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("from %s to %s after %v: %w", from, t, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Expect is Eventually that fails the test.
func (c *Cluster) Expect(from string, t Target, limit time.Duration, check Check) {
	c.T.Helper()
	if err := c.Eventually(from, t, 10, limit, check); err != nil {
		c.T.Fatal(err)
	}
}

// Served: every request answered, each by one of pods, and (when all is
// set) every one of pods answered at least once.
func Served(all bool, pods ...string) Check {
	return func(rs []Result) error {
		seen := map[string]int{}
		for _, r := range rs {
			if !r.OK {
				return fmt.Errorf("request failed: %s (round %v)", r, rs)
			}
			if !slices.Contains(pods, r.Pod) {
				return fmt.Errorf("%s answered, want only %v", r.Pod, pods)
			}
			seen[r.Pod]++
		}
		if all && len(seen) != len(pods) {
			return fmt.Errorf("only %v answered, want all of %v", seen, pods)
		}
		return nil
	}
}

// OnlyBy: every request answered, by pods only (not necessarily all).
func OnlyBy(pods ...string) Check { return Served(false, pods...) }

// AllOf: every request answered by pods, and each of them answered.
func AllOf(pods ...string) Check { return Served(true, pods...) }

// Failing: every request failed, with kind ("" = any failure).
func Failing(kind string) Check {
	return func(rs []Result) error {
		for _, r := range rs {
			if r.OK || (kind != "" && r.Kind != kind) {
				return fmt.Errorf("got %s, want every request to fail (%q)", r, kind)
			}
		}
		return nil
	}
}

// Refused: every request failed and the REJECT rule answered: refused.
// The kernel rate-limits the ICMP errors a REJECT sends (icmp_ratelimit,
// per destination, burst 6), so past the burst a rejected SYN or datagram
// simply goes unanswered and times out; a DROP never gives "refused".
func Refused() Check {
	return func(rs []Result) error {
		refused := 0
		for _, r := range rs {
			switch {
			case r.OK || (r.Kind != "refused" && r.Kind != "timeout"):
				return fmt.Errorf("got %s, want refused (or rate-limited: timeout)", r)
			case r.Kind == "refused":
				refused++
			}
		}
		if refused == 0 {
			return fmt.Errorf("no request was refused (all %d timed out: dropped, not rejected)", len(rs))
		}
		return nil
	}
}

// Load is a steady stream of requests in the background.
type Load struct {
	cmd     *exec.Cmd
	out     *os.File
	done    chan error
	once    sync.Once
	results []Result
}

// StartLoad runs e2ectl ask -n 0 from `from` until Stop. keep makes a UDP
// client reuse one socket (one conntrack flow).
func (c *Cluster) StartLoad(from string, t Target, interval time.Duration, keep bool) *Load {
	c.T.Helper()
	f, err := os.CreateTemp(c.Work, "load-*.txt")
	c.must(err, "load output")
	argv := []string{c.Bins.E2ECtl, "ask", "-n", "0",
		"-interval", interval.String(), "-timeout", "1s", "-duration", "10m"}
	if keep {
		argv = append(argv, "-keep")
	}
	argv = c.InCgroup(from, append(argv, t.args()...))
	cmd := exec.Command("ip", append([]string{"netns", "exec", c.NS(from)}, argv...)...)
	cmd.Stdout, cmd.Stderr = f, f
	c.must(cmd.Start(), "starting load")
	l := &Load{cmd: cmd, out: f, done: make(chan error, 1)}
	go func() { l.done <- cmd.Wait() }()
	c.T.Cleanup(func() { l.Stop() })
	return l
}

// Stop ends the load and returns every outcome.
func (l *Load) Stop() []Result {
	l.once.Do(func() {
		_ = l.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-l.done:
		case <-time.After(5 * time.Second):
			_ = l.cmd.Process.Kill()
			<-l.done
		}
		data, _ := os.ReadFile(l.out.Name())
		l.out.Close()
		_ = os.Remove(l.out.Name())
		l.results = parseResults(string(data))
	})
	return l.results
}

// Snapshot returns the outcomes so far, leaving the load running.
func (l *Load) Snapshot() []Result {
	data, _ := os.ReadFile(l.out.Name())
	return parseResults(string(data))
}

// Failures returns the failed outcomes.
func Failures(rs []Result) []Result {
	var out []Result
	for _, r := range rs {
		if !r.OK {
			out = append(out, r)
		}
	}
	return out
}
