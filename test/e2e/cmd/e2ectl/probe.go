package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// probeCmd sends -n requests, each on a new connection, and prints how they were
// balanced. With -wait it first retries (bounded) until the service answers and, with
// -expect, until every expected pod has answered once. It fails if any request of the
// counted round failed or an unexpected pod answered.
func probeCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	url := fs.String("url", "", "HTTP URL to GET")
	udp := fs.String("udp", "", "HOST:PORT to send UDP datagrams to")
	n := fs.Int("n", 30, "number of requests to count")
	timeout := fs.Duration("timeout", 2*time.Second, "per-request timeout")
	wait := fs.Duration("wait", 0, "first wait up to this long for the expected answers")
	expect := fs.String("expect", "", "comma-separated pods that must (and alone may) answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*url == "") == (*udp == "") {
		return fmt.Errorf("exactly one of -url and -udp is required")
	}
	if *n < 1 || *n > 1000 {
		return fmt.Errorf("-n must be within 1..1000")
	}
	var want []string
	if *expect != "" {
		want = strings.Split(*expect, ",")
	}
	target := *url
	askRaw := func() (string, error) { return askHTTP(*url, *timeout) }
	if *udp != "" {
		target = "udp://" + *udp
		askRaw = func() (string, error) { return askUDP(*udp, *timeout) }
	}
	ask := func() (string, error) {
		ans, err := askRaw()
		if err != nil {
			return "", err
		}
		pod, _ := parseAnswer(ans)
		return pod, nil
	}

	if *wait > 0 {
		start := time.Now()
		if err := waitFor(ctx, ask, want, *wait); err != nil {
			return fmt.Errorf("%s: %w", target, err)
		}
		fmt.Printf("  (answers as expected after %.1f s)\n", time.Since(start).Seconds())
	}

	counts := map[string]int{}
	sources := map[string]map[string]bool{} // pod -> client IPs it saw
	var errs []string
	for range *n {
		ans, err := askRaw()
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		pod, src := parseAnswer(ans)
		counts[pod]++
		if sources[pod] == nil {
			sources[pod] = map[string]bool{}
		}
		sources[pod][src] = true
	}
	report(os.Stdout, target, *n, counts, sources, errs)
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d requests failed, first: %s", len(errs), *n, errs[0])
	}
	for pod := range counts {
		if len(want) > 0 && !slices.Contains(want, pod) {
			return fmt.Errorf("unexpected pod %s answered (want only %s)", pod, *expect)
		}
	}
	return nil
}

// waitFor asks until every pod in want has answered (or any answer, if want is empty).
func waitFor(ctx context.Context, ask func() (string, error), want []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	seen := map[string]bool{}
	var last error
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		pod, err := ask()
		if err == nil {
			seen[pod] = true
			if len(want) == 0 || all(want, seen) {
				return nil
			}
		} else {
			last = err
			time.Sleep(100 * time.Millisecond)
		}
	}
	if last == nil {
		return fmt.Errorf("after %v only %v answered, want %v", limit, keys(seen), want)
	}
	return fmt.Errorf("no expected answer after %v (answered: %v; last error: %v)", limit, keys(seen), last)
}

func all(want []string, seen map[string]bool) bool {
	for _, w := range want {
		if !seen[w] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// askHTTP asks url over a new connection, which the client closes first
// so that TIME_WAIT stays on the client. Were the pod to close first (as
// it does when asked "Connection: close"), a masqueraded client's next
// connection could be given the source port of a flow the pod still holds
// in TIME_WAIT, once the client reusing its own port has replaced that
// flow's conntrack entry; the pod then answers the SYN with an ACK for the
// old flow and the handshake stalls for a retransmission timeout. That is
// the kernel's doing under any proxy, not what the tests measure.
//
// A failure says how far the connection got — the handshake never
// completed (a lost SYN or SYN-ACK) or it did from which local address
// (the conntrack entry to look for) — which is what tells a dropped first
// packet from a slow or lost answer.
func askHTTP(url string, timeout time.Duration) (string, error) {
	start := time.Now()
	var dialed atomic.Pointer[string]
	dialer := &net.Dialer{}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			d := fmt.Sprintf("connected from %s after %d ms", conn.LocalAddr(), time.Since(start).Milliseconds())
			dialed.Store(&d)
		}
		return conn, err
	}
	tr := &http.Transport{Proxy: nil, DialContext: dial, MaxIdleConnsPerHost: 1}
	// Runs after the body is closed, which puts the connection back idle.
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: timeout, Transport: tr}
	resp, err := c.Get(url)
	if err != nil {
		how := "never connected"
		if d := dialed.Load(); d != nil {
			how = *d
		}
		return "", fmt.Errorf("%w (%s)", err, how)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	return checkAnswer(string(body))
}

func askUDP(addr string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("who\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	k, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	return checkAnswer(string(buf[:k]))
}

// checkAnswer accepts a podserver answer "NAME CLIENTADDR".
func checkAnswer(answer string) (string, error) {
	if len(strings.Fields(answer)) != 2 {
		return "", fmt.Errorf("unexpected answer %q", answer)
	}
	return answer, nil
}

// parseAnswer splits a checked answer into the pod name and the client IP it saw.
func parseAnswer(answer string) (pod, clientIP string) {
	f := strings.Fields(answer)
	host, _, err := net.SplitHostPort(f[1])
	if err != nil {
		host = f[1]
	}
	return f[0], host
}

func report(w io.Writer, target string, n int, counts map[string]int, sources map[string]map[string]bool, errs []string) {
	fmt.Fprintf(w, "  %d requests to %s:\n", n, target)
	var pods []string
	for p := range counts {
		pods = append(pods, p)
	}
	slices.Sort(pods)
	for _, p := range pods {
		fmt.Fprintf(w, "    %-10s %3d  %-32s (client seen as %s)\n", p, counts[p], strings.Repeat("#", counts[p]),
			strings.Join(keys(sources[p]), ", "))
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "    %-10s %3d\n", "(failed)", len(errs))
	}
}
