//go:build benche2e

package bench

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// row is one line of the report: a measure taken from every run, and the
// issue's target for it (by mode and scale; "" when it has none).
type row struct {
	name   string
	format string // for one value
	value  func(r runResult) float64
	target func(mode string) string
}

const mib = 1024.0

func noTarget(string) string { return "" }

// targetKey names one of the scale targets: a measure, for a mode at a
// scale (-services).
type targetKey struct {
	measure, mode string
	services      int
}

// issueTargets are the scale targets (docs/performance.md), at the scales
// they were set for.
var issueTargets = map[targetKey]string{
	{"start", "nftables", 10000}:            "≤ 1.0",
	{"start", "nftables", 50000}:            "≤ 5",
	{"start", "iptables", 10000}:            "≤ 15",
	{"rss", "nftables", 10000}:              "≤ 100",
	{"rss", "nftables", 50000}:              "≤ 400",
	{"rss", "iptables", 10000}:              "≤ 200",
	{"restart", "nftables", 10000}:          "≤ 1.0",
	{"restart-writes", "nftables", 10000}:   "0",
	{"churn-p50", "nftables", 10000}:        "≤ 20",
	{"churn-p99", "nftables", 10000}:        "≤ 100",
	{"datapath", "nftables", 1000}:          "the 50k run's reference",
	{"datapath", "nftables", 10000}:         "beside upstream's",
	{"datapath", "nftables", 50000}:         "≥ 90 % of 1k's",
	{"datapath-ratio", "nftables", 50000}:   "≥ 90",
	{"full-sync-writes", "nftables", 50000}: "0",
	{"full-sync-cpu", "nftables", 50000}:    "printed",
	// ebpf mode's (the eBPF issue's): datapath figures at every scale.
	// Start and churn at what serves a connect: the hooks' maps.
	{"start-live", "ebpf", 10000}:      "≤ 0.5",
	{"start-live", "ebpf", 100000}:     "≤ 5",
	{"churn-maps-p50", "ebpf", 10000}:  "≤ 5",
	{"restart-writes", "ebpf", 10000}:  "0",
	{"map-writes", "ebpf", 10000}:      "0",
	{"map-writes", "ebpf", 100000}:     "0",
	{"rss-maps", "ebpf", 100000}:       "≤ 500",
	{"datapath-ratio", "ebpf", 100000}: "≥ 95",
}

// anyScale are the ebpf targets that hold at every scale.
var anyScale = map[targetKey]string{
	{"direct-ratio", "ebpf", 0}:     "≥ 95",
	{"latency-ratio", "ebpf", 0}:    "≤ 105",
	{"kernel-cpu", "ebpf", 0}:       "< nftables'",
	{"nat-per-conn", "ebpf", 0}:     "0",
	{"nat-per-conn", "nftables", 0}: "printed (1 expected)",
}

// target is the issue's target for measure, by mode, at this run's scale.
func target(measure string) func(string) string {
	return func(mode string) string {
		text := issueTargets[targetKey{measure, mode, *flagServices}]
		if text == "" {
			text = anyScale[targetKey{measure, mode, 0}]
		}
		if measure == "datapath" && *flagServices == 50000 && *flagDPReference > 0 && text != "" {
			// The 1k figure of an earlier run, given with -dp-reference.
			text = fmt.Sprintf("≥ %.0f (90 %% of %.0f at 1k)", 0.9**flagDPReference, *flagDPReference)
		}
		return text
	}
}

func rows(children []string) []row {
	out := []row{
		{"machine idle in the second before the start (%)", "%.0f", func(r runResult) float64 { return 100 * r.IdleBeforeStart }, noTarget},
		{"machine speed before the start: SHA-256 of 32 MiB on one CPU, best of 3 (ms)", "%.0f", func(r runResult) float64 { return 1000 * r.SpeedBeforeStart }, noTarget},
		{"nf_tables listeners seen on the machine before the start (each makes the kernel build a notification per change)", "%.0f", func(r runResult) float64 { return float64(r.ListenersBeforeStart) }, noTarget},
		{"machine idle in the second before the restart (%)", "%.0f", func(r runResult) float64 { return 100 * r.Restart.IdleBefore }, noTarget},
		{"start → end of the first sync (s)", "%.2f", func(r runResult) float64 { return r.FirstSync }, noTarget},
		{"start → every ClusterIP in the kernel (s)", "%.2f", func(r runResult) float64 { return r.AllProgrammed }, target("start")},
		{"ebpf: start → every ClusterIP in the hooks' maps, translated at connect (s)", "%.2f", func(r runResult) float64 { return r.MapLive }, target("start-live")},
		{"ebpf: ClusterIPs in the hooks' services map, proxy idle", "%.0f", func(r runResult) float64 { return float64(r.MapIPs) }, noTarget},
		{"ebpf: service records in the maps once all were programmed", "%.0f", func(r runResult) float64 { return r.ServiceRecords }, noTarget},
		{"ebpf: backend slots in the maps then", "%.0f", func(r runResult) float64 { return r.BackendSlots }, noTarget},
		{"syncs until all were programmed", "%.0f", func(r runResult) float64 { return r.SyncsToAll }, noTarget},
		{"ClusterIPs in the kernel, proxy idle", "%.0f", func(r runResult) float64 { return float64(r.KernelIPs) }, noTarget},
		{"ClusterIPs the API lists", "%.0f", func(r runResult) float64 { return float64(r.WantIPs) }, noTarget},
		{"proxy CPU, start → first sync (s)", "%.2f", func(r runResult) float64 { return r.CPUToFirstSync }, noTarget},
		{"floor: a decode-only client's initial lists (s)", "%.2f", func(r runResult) float64 { return r.ListFloor }, noTarget},
		{"floor, one plain LIST per kind instead (s)", "%.2f", func(r runResult) float64 { return r.PlainListFloor }, noTarget},
		{"floor, consistent LISTs in pages of 2,000 (s)", "%.2f", func(r runResult) float64 { return r.PagedListFloor }, noTarget},
		{"floor in pages: API server + etcd CPU (s)", "%.2f", func(r runResult) float64 { return r.PagedListCPCPU }, noTarget},
		{"floor in pages, not asking for gzip (s)", "%.2f", func(r runResult) float64 { return r.PagedListFloorPlain }, noTarget},
		{"floor in pages, not asking for gzip: API server + etcd CPU (s)", "%.2f", func(r runResult) float64 { return r.PagedListCPCPUPlain }, noTarget},
		{"restart unchanged → end of first sync (s)", "%.2f", func(r runResult) float64 { return r.Restart.FirstSync }, target("restart")},
		{"restart: kernel changes (notifications)", "%.0f", func(r runResult) float64 { return float64(r.Restart.KernelChanges) }, target("restart-writes")},
		{"restart: map writes (svcproxy_ebpf_map_writes_total of the new process)", "%.0f", func(r runResult) float64 { return r.Restart.MapWrites }, target("map-writes")},
		{"restart: kernel observer overflowed (1: counts are lower bounds)", "%.0f", func(r runResult) float64 { return b2f(r.Restart.Overflowed) }, noTarget},
		{"restart: kernel transactions (notifications)", "%.0f", func(r runResult) float64 { return float64(r.Restart.Transactions) }, noTarget},
		{"restart: proxy CPU until quiet (s)", "%.2f", func(r runResult) float64 { return r.Restart.CPUSeconds }, noTarget},
		{"churn updates sent (API errors excluded)", "%.0f", func(r runResult) float64 { return float64(r.Churn.Sent) }, noTarget},
		{"churn rate achieved (updates/s)", "%.1f", func(r runResult) float64 { return r.Churn.Rate }, noTarget},
		{"churn: API write → kernel p50 (ms, kernel)", "%.1f", func(r runResult) float64 { return ms(r.Churn.KernelP50) }, target("churn-p50")},
		{"churn: API write → kernel p99 (ms, kernel)", "%.1f", func(r runResult) float64 { return ms(r.Churn.KernelP99) }, target("churn-p99")},
		{"churn: API write → kernel max (ms, kernel)", "%.1f", func(r runResult) float64 { return ms(r.Churn.KernelMax) }, noTarget},
		{"ebpf churn: API write → hooks' maps p50 (ms, connect-time histogram, interpolated)", "%.1f", func(r runResult) float64 { return ms(r.Churn.MapP50) }, target("churn-maps-p50")},
		{"ebpf churn: API write → hooks' maps p99 (ms, interpolated)", "%.1f", func(r runResult) float64 { return ms(r.Churn.MapP99) }, noTarget},
		{"ebpf churn: API write → hooks' maps mean (ms, exact)", "%.1f", func(r runResult) float64 { return ms(r.Churn.MapMean) }, noTarget},
		{"ebpf churn: changes observed at the maps", "%.0f", func(r runResult) float64 { return float64(r.Churn.MapN) }, noTarget},
		{"churn stage: API write → answered p50 (ms)", "%.1f", func(r runResult) float64 { return ms(r.Churn.Stages.WriteP50) }, noTarget},
		{"churn stage: API write → harness's own watch p50 (ms: the reference's share)", "%.1f", func(r runResult) float64 { return ms(r.Churn.Stages.DeliveryP50) }, noTarget},
		{"churn stage: API write → harness's own watch p99 (ms)", "%.1f", func(r runResult) float64 { return ms(r.Churn.Stages.DeliveryP99) }, noTarget},
		{"churn stage: partial sync p50 (ms, interpolated; iptables and nftables modes export it)", "%.1f", func(r runResult) float64 { return ms(r.Churn.Stages.SyncP50) }, noTarget},
		{"churn stage: partial sync mean (ms, exact)", "%.2f", func(r runResult) float64 { return ms(r.Churn.Stages.SyncMean) }, noTarget},
		{"churn stage: partial syncs", "%.0f", func(r runResult) float64 { return float64(r.Churn.Stages.SyncN) }, noTarget},
		{"churn: changes never seen in the kernel", "%.0f", func(r runResult) float64 { return float64(r.Churn.KernelMissing) }, noTarget},
		{"churn: proxy CPU, incl. children (s)", "%.2f", func(r runResult) float64 { return r.Churn.CPUSeconds }, noTarget},
		{"programming latency histogram mean (ms)", "%.0f", func(r runResult) float64 { return ms(r.Churn.Mean) }, noTarget},
		{"programming latency p99, interpolated (s)", "%.3f", func(r runResult) float64 { return r.Churn.P99Interp }, noTarget},
		{"churn updates observed in the histogram", "%.0f", func(r runResult) float64 { return float64(r.Churn.Observed) }, noTarget},
		{"datapath: new connections/s via a ClusterIP", "%.0f", func(r runResult) float64 { return r.Datapath.Rate }, target("datapath")},
		{"datapath: control plane CPU in the window (s)", "%.1f", func(r runResult) float64 { return r.Datapath.CPCPUSeconds }, noTarget},
		{"datapath, control plane stopped: new connections/s", "%.0f", func(r runResult) float64 { return pausedRate(r) }, target("datapath")},
		{"datapath, control plane stopped, direct to the pod IP: new connections/s", "%.0f", func(r runResult) float64 { return dp(r, direct, rate) }, noTarget},
		{"datapath, control plane stopped: via the ClusterIP in % of direct", "%.1f", func(r runResult) float64 { return pct(dp(r, paused, rate), dp(r, direct, rate)) }, target("direct-ratio")},
		{"datapath: kernel CPU (system+irq+softirq, machine) per 100k connections via the ClusterIP (s)", "%.2f", func(r runResult) float64 { return dp(r, paused, kernelPer100k) }, target("kernel-cpu")},
		{"datapath: kernel CPU per 100k connections direct (s)", "%.2f", func(r runResult) float64 { return dp(r, direct, kernelPer100k) }, noTarget},
		{"datapath: NAT'ed conntrack entries left after the window per connection via the ClusterIP (node namespace; lower bound)", "%.3f", func(r runResult) float64 { return dp(r, paused, natPerConn) }, target("nat-per-conn")},
		{"datapath: NAT'ed conntrack entries left per connection direct", "%.3f", func(r runResult) float64 { return dp(r, direct, natPerConn) }, noTarget},
		{"latency, one connection in flight, via the ClusterIP: p50 (ms)", "%.3f", func(r runResult) float64 { return dp(r, latency, p50) }, noTarget},
		{"latency via the ClusterIP: p99 (ms)", "%.3f", func(r runResult) float64 { return dp(r, latency, p99) }, noTarget},
		{"latency direct to the pod IP: p50 (ms)", "%.3f", func(r runResult) float64 { return dp(r, directLatency, p50) }, noTarget},
		{"latency direct: p99 (ms)", "%.3f", func(r runResult) float64 { return dp(r, directLatency, p99) }, noTarget},
		{"latency p50 via the ClusterIP in % of direct", "%.1f", func(r runResult) float64 { return pct(dp(r, latency, p50), dp(r, directLatency, p50)) }, target("latency-ratio")},
		{"latency p99 via the ClusterIP in % of direct", "%.1f", func(r runResult) float64 { return pct(dp(r, latency, p99), dp(r, directLatency, p99)) }, target("latency-ratio")},
		{"datapath reference, same invocation, before and after the run: control plane stopped (conn/s)", "%.0f", func(r runResult) float64 { return refPausedRate(r) }, noTarget},
		{"datapath, control plane stopped: % of the reference", "%.1f", func(r runResult) float64 { return refRatio(r) }, target("datapath-ratio")},
		{"datapath: failed connections", "%.0f", func(r runResult) float64 { return float64(r.Datapath.Errors + pausedErrors(r)) }, noTarget},
		{"full sync, nothing changed: kernel changes", "%.0f", func(r runResult) float64 { return float64(r.FullSync.KernelChanges) }, target("full-sync-writes")},
		{"full sync: kernel observer overflowed (1: counts are lower bounds)", "%.0f", func(r runResult) float64 { return b2f(r.FullSync.Overflowed) }, noTarget},
		{"full sync: proxy CPU until quiet (s)", "%.2f", func(r runResult) float64 { return r.FullSync.CPUSeconds }, target("full-sync-cpu")},
		{"full sync: duration, proxy's histogram (s)", "%.2f", func(r runResult) float64 { return r.FullSync.Seconds }, noTarget},
		{"proxy peak RSS after first sync (MiB)", "%.0f", func(r runResult) float64 { return float64(r.RSSAfterFirstSync) / mib }, noTarget},
		{"proxy peak RSS, cold start + churn (MiB)", "%.0f", func(r runResult) float64 { return float64(r.RSSPeak) / mib }, noTarget},
		{"proxy peak RSS, restarted process (MiB)", "%.0f", func(r runResult) float64 { return float64(r.Restart.RSS) / mib }, noTarget},
		{"peak RSS in all: proxy + largest child (MiB)", "%.0f", func(r runResult) float64 { return float64(inAll(r)) / mib }, target("rss")},
		{"ebpf maps' memory, memlock of the maps the proxy holds (MiB)", "%.1f", func(r runResult) float64 { return float64(r.MapMemlockKiB) / mib }, noTarget},
		{"proxy peak RSS + maps' memory (MiB)", "%.0f", func(r runResult) float64 { return float64(max(r.RSSPeak, r.Restart.RSS)+r.MapMemlockKiB) / mib }, target("rss-maps")},
	}
	for _, key := range syncStageKeys {
		out = append(out, row{"churn stage, the proxy's log at -v=4: " + key + " p50 (ms)", "%.2f", func(r runResult) float64 {
			if q, ok := r.Churn.Stages.Proxy[key]; ok {
				return ms(q.P50)
			}
			return -1
		}, noTarget})
	}
	for _, name := range children {
		out = append(out, row{"child " + name + " peak RSS, sampled (MiB)", "%.0f", func(r runResult) float64 {
			for _, c := range r.Children {
				if c.Name == name {
					return float64(c.HWMKiB) / mib
				}
			}
			return math.NaN()
		}, noTarget})
	}
	return append(out,
		row{"wait4 maxrss: proxy, largest child or this benchmark at the spawn (MiB)", "%.0f", func(r runResult) float64 { return float64(r.WaitMaxRSS) / mib }, noTarget},
		row{"cluster up from the seed (s)", "%.1f", func(r runResult) float64 { return r.ClusterUp }, noTarget},
		row{"load average (1 min) before run", "%.2f", func(r runResult) float64 { return r.Load1Before }, noTarget},
		row{"load average (1 min) after run", "%.2f", func(r runResult) float64 { return r.Load1After }, noTarget},
	)
}

// inAll is the proxy's peak (cold or restarted, whichever is larger) plus
// its largest child's sampled peak, in KiB.
// pausedRate is the datapath rate with the control plane stopped, -1 when
// not measured.
func pausedRate(r runResult) float64 {
	if r.Datapath.Paused == nil {
		return -1
	}
	return r.Datapath.Paused.Rate
}

// refPausedRate is the same-invocation reference's rate with the control
// plane stopped, the mean of the measurements before and after the run;
// -1 when not measured.
func refPausedRate(r runResult) float64 {
	var sum float64
	n := 0
	for _, ref := range []*datapathResult{r.DPRefBefore, r.DPRefAfter} {
		if ref != nil && ref.Paused != nil {
			sum += ref.Paused.Rate
			n++
		}
	}
	if n == 0 {
		return -1
	}
	return sum / float64(n)
}

// refRatio is this run's datapath rate with the control plane stopped, in
// % of the reference measured just before it; -1 without one.
func refRatio(r runResult) float64 {
	ref, rate := refPausedRate(r), pausedRate(r)
	if ref <= 0 || rate < 0 {
		return -1
	}
	return 100 * rate / ref
}

func pausedErrors(r runResult) int {
	if r.Datapath.Paused == nil {
		return 0
	}
	return r.Datapath.Paused.Errors
}

func inAll(r runResult) int64 {
	var child int64
	for _, c := range r.Children {
		child = max(child, c.HWMKiB)
	}
	return max(r.RSSPeak, r.Restart.RSS) + child
}

// printReport prints one table: per mode and measure the median and every
// run's value, then what the measures mean.
func printReport(w io.Writer, results []runResult) {
	fmt.Fprintf(w, "\nbench-e2e: %d Services × %d endpoints through the API; churn %d updates at %g/s; minSyncPeriod %s; datapath %d connections in flight for %v; %d CPUs\n\n",
		*flagServices, *flagEndpoints, *flagChanges, *flagRate, orDefault(*flagMinSync), *flagDPConns, *flagDPDuration, runtime.NumCPU())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tmode\tmedian [min … max]\ttarget\truns")
	for _, mode := range modesOf(results) {
		var rs []runResult
		for _, r := range results {
			if r.Mode == mode {
				rs = append(rs, r)
			}
		}
		for _, rw := range rows(childNames(rs)) {
			var vals []float64
			var cells []string
			for _, r := range rs {
				v := rw.value(r)
				vals = append(vals, v)
				cells = append(cells, cell(rw.format, v))
			}
			lo, hi := span(vals)
			fmt.Fprintf(tw, "%s\t%s\t%s [%s … %s]\t%s\t%s\n", rw.name, mode, cell(rw.format, median(vals)),
				cell(rw.format, lo), cell(rw.format, hi), rw.target(mode), strings.Join(cells, ", "))
		}
	}
	tw.Flush()
	printIssueSummary(w, results)
	fmt.Fprint(w, legend)
}

const legend = `
Idle: before the start and before the restart the benchmark waits (at most -idle-wait) until the
machine was -idle-share idle over one second: the previous run's teardown (the kernel frees network
namespaces, conntrack entries and tables in the background) and a freshly started API server would
otherwise share the CPUs with the start being measured.
First sync: from just before the proxy's exec to the end of its first successful sync, as it stamps
it in kubeproxy_sync_proxy_rules_last_timestamp_seconds (polled every 200 ms, uncompressed).
Every ClusterIP in the kernel: once the proxy has made no sync for 5 s, the kernel is dumped (nft list
table / iptables-save) and the API's ClusterIPs are counted in it; with no sync during the dump, the
time is the end of the last sync before it (the proxy's stamp, taken after the kernel accepted the
transaction). Nothing changes in the API meanwhile, so more than one sync means the first sync ran
before the proxy had received every listed Service.
Floor: after the run, against the same API server, a client that only decodes runs the initial
lists a proxy's informers run (streaming watch-list, protobuf, Services and EndpointSlices at once)
and keeps nothing: no proxy can have its rules live sooner on this machine. The plain-LIST floor
does one LIST per kind (resourceVersion 0, from the watch cache) instead, as informers did before.
Restart: SIGTERM, then the same binary started again with nothing changed; a netlink listener on
the nf_tables group in the node's namespace (what nft monitor reads) counts every change notification
and transaction from just before the start until the proxy has been quiet for 5 s. When its 64 MiB
buffer overflows (iptables-nft rewriting 10k Services sends ~80k notifications), the kernel drops
some: the "overflowed" rows say so, and the counts are then lower bounds.
Churn: distinct Services' slices updated at the given rate by 8 writers (one round trip each), each
moving one endpoint to a new address and stamping last-change-trigger-time just before the write.
API write → kernel: from that stamp to the first new-set-element notification of the kernel holding
the new address (the same listener, stamped as read): the whole path, API server and watch included. Proxy CPU: utime+stime of the proxy and its waited-for children (/proc/PID/stat), from the
first write until the histogram counted every update. The histogram rows are the proxy's own
kubeproxy_network_programming_duration_seconds (delta over the churn).
Datapath: a podserver pod on the node behind a new ClusterIP Service (added after the churn; no
probe before its ClusterIP is in the node's rules: an un-DNATed SYN's conntrack entry would fail a
later connection from the same port); from the client pod cli1 (same node) e2ectl rate keeps -dp-conns connections in flight for -dp-duration,
each a new TCP connection + one HTTP/1.0 request read to the end: connections/s. Client, server and
Service are the same for every mode; only the proxy's rules around them differ. Control plane CPU:
etcd's and kube-apiserver's during that window (they share the cores). "Control plane stopped": a
second window of the same length with both SIGSTOPped (-dp-paused): the rules' cost without the
control plane's background work, which grows with the objects it holds. Reference (-dp-ref-services):
before each round of runs and after the last, the same datapath on a cluster of that many Services (its
own seed); each run is compared with the mean of the reference before and after it, so that the
50k/1k ratio comes from one invocation and a drift of the machine's speed during the run is halved.
The 50k target is read on that ratio, with the control plane stopped in both. The client runs in its
node's cgroup (ebpf mode's hooks translate it, as a pod's process). Also with the control plane
stopped: the same window direct to the server pod's IP (the reference for "% of direct"), and one
connection in flight (-dp-latency-duration) through the ClusterIP and direct: p50/p99 of connect →
answer's end. Before each window the node namespace's conntrack table is flushed; after it, NAT
entries are the entries whose reply tuple is not the original reversed (conntrack -L), per
connection: a lower bound of the entries created, as a client port reused within the window
replaces its earlier entry (TIME_WAIT reopened) rather than adding one; 0 means none was made. Kernel CPU: the machine's system+irq+softirq time over the window (/proc/stat),
scaled to 100k connections: client, server and the packets' path, and whatever else the machine
ran in the kernel meanwhile (compare modes within one invocation).
ebpf mode: "in the hooks' maps" is when svcproxy's connect-time stamp says the maps held the
sync after which the pinned services map holds every ClusterIP (read in the same quiet moment as the
rules); the maps' churn latency is svcproxy's connect-time histogram (API write → maps written), the
kernel one the nftables half's new-element notification, which only the whole sync bounds. Restart map
writes: svcproxy_ebpf_map_writes_total of the new process once quiet. Maps' memory: the memlock of
the BPF maps the proxy holds (/proc/PID/fdinfo, each map once), at the end of the cold run.
Full sync: the Node's zone label is changed, which makes svcproxy (a changed node) and upstream
(OnTopologyChange) run the full sync their hourly resync runs; no slice has hints, so nothing in the
rules depends on it. The kernel listener counts notifications from the write until the proxy has been
quiet for 5 s; CPU is the proxy's (children included) over the same interval.
RSS: VmHWM of the proxy; children (nft, iptables-restore) sampled every 20 ms from /proc (lower
bound: short-lived ones are missed); "in all" adds the largest child's peak to the proxy's; wait4
maxrss (first process) is an upper bound for the largest child, and no more: Go starts a process with
vfork, and at its exec the kernel keeps the parent's high-water mark as the child's, so it also holds
this benchmark's own peak at the spawn (it grows from run to run; not the proxy's).
Targets: docs/performance.md's, shown for svcproxy's own modes at the scale they were set for.
`

// ms converts seconds, keeping "none" (negative) as it is.
func ms(s float64) float64 {
	if s < 0 {
		return s
	}
	return s * 1000
}

func orDefault(s string) string {
	if s == "" {
		return "default (1s)"
	}
	return s
}

func cell(format string, v float64) string {
	if math.IsNaN(v) || v < 0 {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// median of the defined values (NaN and negative values stand for "none").
func median(vals []float64) float64 {
	var ok []float64
	for _, v := range vals {
		if !math.IsNaN(v) && v >= 0 {
			ok = append(ok, v)
		}
	}
	if len(ok) == 0 {
		return math.NaN()
	}
	sort.Float64s(ok)
	if len(ok)%2 == 1 {
		return ok[len(ok)/2]
	}
	return (ok[len(ok)/2-1] + ok[len(ok)/2]) / 2
}

// span is the min and max of the defined values.
func span(vals []float64) (lo, hi float64) {
	lo, hi = math.NaN(), math.NaN()
	for _, v := range vals {
		if math.IsNaN(v) || v < 0 {
			continue
		}
		if math.IsNaN(lo) || v < lo {
			lo = v
		}
		if math.IsNaN(hi) || v > hi {
			hi = v
		}
	}
	return lo, hi
}

// modesOf lists the modes in the order they first ran.
func modesOf(results []runResult) []string {
	var out []string
	for _, r := range results {
		if !slices.Contains(out, r.Mode) {
			out = append(out, r.Mode)
		}
	}
	return out
}

func childNames(rs []runResult) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		for _, c := range r.Children {
			if !seen[c.Name] {
				seen[c.Name] = true
				out = append(out, c.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
