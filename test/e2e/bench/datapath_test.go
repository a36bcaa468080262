//go:build benche2e

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// datapathResult is the new-connection rate through one ClusterIP.
type datapathResult struct {
	Rate       float64 // connections/s, each a connect + one HTTP request + close
	OK, Errors int
	Seconds    float64 // the window's length, as e2ectl measured it
	// P50MS, P99MS: a connection's time from connect to the answer's end
	// (e2ectl rate), milliseconds.
	P50MS, P99MS float64
	CPUSeconds   float64 // the proxy's during the measurement (expected ≈ 0)
	// CPCPUSeconds is etcd's and kube-apiserver's CPU during the
	// measurement: they share the machine's cores with client and server.
	CPCPUSeconds float64
	// KernelSeconds is the machine's system + softirq + irq time during
	// the window (/proc/stat): client, server and the packets' path.
	KernelSeconds float64
	// NATEntries are the conntrack entries with a NAT binding in the
	// node's namespace after the window, which starts with an empty
	// table (-1: not counted); a client port reused in the window
	// replaced its earlier entry, so this is a lower bound of those made.
	NATEntries int
	// Paused is a second window of the same length with etcd and
	// kube-apiserver stopped (SIGSTOP): the rules' cost alone, without
	// the control plane's background work, which grows with the number of
	// objects (-dp-paused).
	Paused *datapathResult `json:",omitempty"`
	// Direct is the paused window's twin to the server pod's own address:
	// the same client and server with no Service on the way; the two
	// alternate (pairedWindows).
	Direct *datapathResult `json:",omitempty"`
	// Latency and DirectLatency are paused windows with one connection in
	// flight (-dp-latency-duration), through the ClusterIP and direct:
	// a connection's round trip without queueing behind the others.
	Latency       *datapathResult `json:",omitempty"`
	DirectLatency *datapathResult `json:",omitempty"`
}

// dpService is the one Service the datapath measurement adds to the seed.
const dpService = "bench-datapath"

// measureDatapath adds a server pod on the node and a Service for it, waits
// until the proxy has its ClusterIP in the kernel and then until the client
// pod (cli1, behind the same node) reaches it through it, then runs e2ectl
// rate there: -dp-conns connections in flight
// for -dp-duration, each a new connection (conntrack entry, NAT lookup
// through the proxy's rules). The same client, server and Service for
// every mode; the seeded Services are the rules the packet is looked up in.
func measureDatapath(t *testing.T, c *F.Cluster, n *F.Node) datapathResult {
	if *flagDPDuration <= 0 {
		return datapathResult{Rate: -1}
	}
	pod := c.AddPod(n, "dpsrv")
	svc := c.CreateService(F.NewService(dpService, corev1.ServiceTypeClusterIP))
	c.SetEndpoints(svc, F.EP{Pod: pod})
	target := F.TCP(svc.Spec.ClusterIP, 80)
	// No probe before the rules: a SYN the proxy has not DNATed yet leaves
	// the node for the ClusterIP itself and a conntrack entry that lives
	// 120 s; the rate test reuses its source port within seconds, and that
	// connection fails ("no route to host"), whatever the proxy does then.
	waitInKernel(t, c, n, svc.Spec.ClusterIP)
	if err := c.Eventually("cli1", target, 3, 2*time.Minute, F.OnlyBy(pod.Name)); err != nil {
		t.Fatalf("datapath Service not reachable: %v", err)
	}
	res := rateWindow(t, c, n, target.Addr, *flagDPConns, *flagDPDuration)
	t.Logf("datapath: %.0f conn/s, control plane CPU %.2f s", res.Rate, res.CPCPUSeconds)
	if *flagDPPaused {
		direct := F.TCP(pod.IP, 8080).Addr
		resume := pauseControlPlane(t, c)
		stopPerf := startPerf(t, filepath.Join(c.Work, "perf-datapath.data"))
		paused, straight := pairedWindows(t, c, n, target.Addr, direct, *flagDPConns, *flagDPDuration)
		stopPerf()
		res.Paused, res.Direct = &paused, &straight
		if *flagDPLatency > 0 {
			lat, dlat := pairedWindows(t, c, n, target.Addr, direct, 1, *flagDPLatency)
			res.Latency, res.DirectLatency = &lat, &dlat
		}
		resume()
		t.Logf("datapath, control plane stopped: %.0f conn/s via the ClusterIP, %.0f direct; %d NAT entries for %d connections",
			paused.Rate, straight.Rate, paused.NATEntries, paused.OK)
	}
	return res
}

// dpRounds is how many windows each side of a paired measurement gets.
const dpRounds = 2

// pairedWindows alternates windows through the ClusterIP (via) and direct
// to the pod, dpRounds of each, d in all per side, so that a change of
// the machine's load during the measurement falls on both sides alike.
func pairedWindows(t *testing.T, c *F.Cluster, n *F.Node, via, direct string, conns int, d time.Duration) (viaRes, directRes datapathResult) {
	for range dpRounds {
		viaRes = addWindows(viaRes, rateWindow(t, c, n, via, conns, d/dpRounds))
		directRes = addWindows(directRes, rateWindow(t, c, n, direct, conns, d/dpRounds))
	}
	return viaRes, directRes
}

// addWindows adds window b to the sum a: counts and CPU seconds add up,
// the rate is over the summed time, and the latency quantiles are the
// windows' weighted by their connections (an approximation).
func addWindows(a, b datapathResult) datapathResult {
	if a.Seconds == 0 {
		return b
	}
	sum := a
	sum.OK, sum.Errors, sum.Seconds = a.OK+b.OK, a.Errors+b.Errors, a.Seconds+b.Seconds
	sum.Rate = float64(sum.OK) / sum.Seconds
	if sum.OK > 0 {
		w := func(x, y float64) float64 { return (x*float64(a.OK) + y*float64(b.OK)) / float64(sum.OK) }
		sum.P50MS, sum.P99MS = w(a.P50MS, b.P50MS), w(a.P99MS, b.P99MS)
	}
	sum.CPUSeconds += b.CPUSeconds
	sum.CPCPUSeconds += b.CPCPUSeconds
	sum.KernelSeconds += b.KernelSeconds
	if a.NATEntries < 0 || b.NATEntries < 0 {
		sum.NATEntries = -1
	} else {
		sum.NATEntries += b.NATEntries
	}
	return sum
}

func ptr[T any](v T) *T { return &v }

// rateWindow runs e2ectl rate once from cli1 (in its node's cgroup, where
// ebpf mode's hooks see it, as a pod's process would be) against addr
// with conns connections in flight, and reads the proxy's, the control
// plane's and the kernel's CPU around it and the NAT entries it made.
func rateWindow(t *testing.T, c *F.Cluster, n *F.Node, addr string, conns int, d time.Duration) datapathResult {
	flushConntrack(t, n)
	cpPIDs := c.ControlPlanePIDs()
	cpu0, cp0, k0 := cpuSeconds(n.Proxy.Pid()), cpuOf(cpPIDs), kernelCPUSeconds()
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	argv := c.InCgroup("cli1", []string{c.Bins.E2ECtl, "rate", "-addr", addr,
		"-conns", strconv.Itoa(conns), "-duration", d.String()})
	out, err := F.InNS(ctx, c.NS("cli1"), argv[0], argv[1:]...)
	if err != nil {
		t.Fatalf("e2ectl rate: %v: %s", err, out)
	}
	k1 := kernelCPUSeconds()
	res, err := parseRate(string(out))
	if err != nil {
		t.Fatal(err)
	}
	res.CPUSeconds = cpuSeconds(n.Proxy.Pid()) - cpu0
	res.CPCPUSeconds = cpuOf(cpPIDs) - cp0
	res.KernelSeconds = k1 - k0
	res.NATEntries = natEntries(t, n)
	return res
}

// startPerf records every CPU's stacks (perf record -a -g) into out until
// the returned function is called, when -dp-perf is set: where the
// machine spends a datapath window (kernel lookups, conntrack, NAT).
func startPerf(t *testing.T, out string) (stop func()) {
	if !*flagDPPerf {
		return func() {}
	}
	cmd := exec.Command("perf", "record", "-a", "-g", "-F", "499", "-o", out)
	if err := cmd.Start(); err != nil {
		t.Fatalf("perf record: %v", err)
	}
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Logf("perf record: %v", err)
		}
		t.Logf("datapath perf profile: %s (perf report -i)", out)
	}
}

// cpuOf sums the CPU seconds of pids.
func cpuOf(pids []int) float64 {
	var sum float64
	for _, pid := range pids {
		sum += max(cpuSeconds(pid), 0)
	}
	return sum
}

// pauseControlPlane stops etcd and kube-apiserver (SIGSTOP) and returns
// what resumes them; t's cleanup resumes them too, should the test end
// in between.
func pauseControlPlane(t *testing.T, c *F.Cluster) (resume func()) {
	pids := c.ControlPlanePIDs()
	if len(pids) != 2 {
		t.Fatalf("control plane pids: %v (want etcd and kube-apiserver)", pids)
	}
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil {
				t.Errorf("signal %v to %d: %v", sig, pid, err)
			}
		}
	}
	var once sync.Once
	resume = func() { once.Do(func() { signal(syscall.SIGCONT) }) }
	t.Cleanup(resume)
	signal(syscall.SIGSTOP)
	return resume
}

// datapathReference measures the datapath alone on a cluster seeded with
// refSeed (the -dp-ref-services Services): the same client, server,
// Service and windows as measureDatapath, no churn, restart or full sync.
func datapathReference(t *testing.T, refSeed string) *datapathResult {
	c := F.New(t, F.Options{Mode: refMode(), Nodes: 1, NoProxy: true, SeedDir: refSeed,
		SyncPeriod: *flagSyncPeriod, MinSyncPeriod: *flagMinSync, ServiceCIDR: serviceCIDRFor(*flagDPRefServices)})
	n := c.Nodes[0]
	start := time.Now()
	if err := c.StartProxy(n); err != nil {
		t.Fatal(err)
	}
	waitFirstSync(t, c, n, start)
	res := measureDatapath(t, c, n)
	return &res
}

// refMode is the reference cluster's mode: the first of -modes when it
// is one of svcproxy's, else nftables.
func refMode() string {
	if m := modeList(); len(m) > 0 && (m[0] == "iptables" || m[0] == "ebpf") {
		return m[0]
	}
	return "nftables"
}

// parseRate reads e2ectl rate's line.
func parseRate(out string) (datapathResult, error) {
	var r datapathResult
	if _, err := fmt.Sscanf(out, "rate %f ok %d errors %d seconds %f p50-ms %f p99-ms %f",
		&r.Rate, &r.OK, &r.Errors, &r.Seconds, &r.P50MS, &r.P99MS); err != nil {
		return r, fmt.Errorf("parsing e2ectl rate's %q: %w", out, err)
	}
	return r, nil
}

// waitInKernel polls the node's rules until they hold ip (port 80, TCP),
// then waits a second more: the proxy's transaction order puts the
// frontend last, and a layout may hold the address elsewhere first.
func waitInKernel(t *testing.T, c *F.Cluster, n *F.Node, ip string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		found, err := inRules(ctx, c.Opts.Mode, n, ip)
		if err == nil && found {
			time.Sleep(time.Second)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ClusterIP %s not in the node's rules after 2 min (last error: %v)", ip, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// inRules says whether the node's rules have ip:80/TCP. The nftables table
// is asked for that one element of its service-ips map (svcproxy's name
// and upstream's), since listing the whole table takes minutes at 100k
// Services; iptables rules are read whole.
func inRules(ctx context.Context, mode string, n *F.Node, ip string) (bool, error) {
	if F.UsesNFTables(mode) {
		_, err := F.InNS(ctx, n.NS, "nft", "get", "element", "ip", "kube-proxy", "service-ips", "{ "+ip+" . tcp . 80 }")
		return err == nil, nil
	}
	dump, err := dumpRules(ctx, mode, n)
	return err == nil && foundIPs(dump, map[string]bool{ip: true})[ip], err
}
