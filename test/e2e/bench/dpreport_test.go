//go:build benche2e

package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// The datapath windows the report reads, and what of each.
var (
	paused        = func(d datapathResult) *datapathResult { return d.Paused }
	direct        = func(d datapathResult) *datapathResult { return d.Direct }
	latency       = func(d datapathResult) *datapathResult { return d.Latency }
	directLatency = func(d datapathResult) *datapathResult { return d.DirectLatency }
)

func rate(w *datapathResult) float64 { return w.Rate }
func p50(w *datapathResult) float64  { return w.P50MS }
func p99(w *datapathResult) float64  { return w.P99MS }

// kernelPer100k is the window's kernel CPU seconds scaled to 100,000
// connections.
func kernelPer100k(w *datapathResult) float64 {
	if w.OK == 0 || w.KernelSeconds < 0 {
		return -1
	}
	return w.KernelSeconds * 100000 / float64(w.OK)
}

// natPerConn is the NAT'ed conntrack entries left after the window per
// connection: a lower bound of those created (a reused client port
// replaces its entry).
func natPerConn(w *datapathResult) float64 {
	if w.OK == 0 || w.NATEntries < 0 {
		return -1
	}
	return float64(w.NATEntries) / float64(w.OK)
}

// dp reads figure of run r's window (-1 when the window was not measured).
func dp(r runResult, window func(datapathResult) *datapathResult, figure func(*datapathResult) float64) float64 {
	w := window(r.Datapath)
	if w == nil {
		return -1
	}
	return figure(w)
}

// pct is a in % of b, -1 when either is missing.
func pct(a, b float64) float64 {
	if a < 0 || b <= 0 {
		return -1
	}
	return 100 * a / b
}

// issueFigure is one line of the eBPF issue's summary: a figure's median
// per mode, and whether ebpf mode's meets its target.
type issueFigure struct {
	name, format string
	value        func(runResult) float64
	target       string
	// met judges ebpf mode's median, with every mode's at hand.
	met func(ebpf float64, medians map[string]float64) bool
	// needs is a mode whose median met compares with.
	needs string
}

func atMost(limit float64) func(float64, map[string]float64) bool {
	return func(v float64, _ map[string]float64) bool { return v <= limit }
}

func atLeast(limit float64) func(float64, map[string]float64) bool {
	return func(v float64, _ map[string]float64) bool { return v >= limit }
}

func issueFigures() []issueFigure {
	startLimit := 0.5
	if *flagServices > 10000 {
		startLimit = 5
	}
	out := []issueFigure{
		{"new connections/s via the ClusterIP, control plane stopped", "%.0f", func(r runResult) float64 { return dp(r, paused, rate) }, "", nil, ""},
		{"the same, direct to the pod IP", "%.0f", func(r runResult) float64 { return dp(r, direct, rate) }, "", nil, ""},
		{"via the ClusterIP in % of direct", "%.1f", func(r runResult) float64 { return pct(dp(r, paused, rate), dp(r, direct, rate)) }, "≥ 95", atLeast(95), ""},
		{"kernel CPU per 100k connections via the ClusterIP (s)", "%.2f", func(r runResult) float64 { return dp(r, paused, kernelPer100k) }, "< nftables'",
			func(v float64, m map[string]float64) bool { return v < m["nftables"] }, "nftables"},
		{"latency p50 via the ClusterIP in % of direct", "%.1f", func(r runResult) float64 { return pct(dp(r, latency, p50), dp(r, directLatency, p50)) }, "≤ 105", atMost(105), ""},
		{"latency p99 via the ClusterIP in % of direct", "%.1f", func(r runResult) float64 { return pct(dp(r, latency, p99), dp(r, directLatency, p99)) }, "≤ 105", atMost(105), ""},
		{"NAT'ed conntrack entries left per connection via the ClusterIP (lower bound)", "%.3f", func(r runResult) float64 { return dp(r, paused, natPerConn) }, "0", atMost(0), ""},
		{"start → every ClusterIP served at connect (ebpf: the hooks' maps; others: the rules) (s)", "%.2f", liveAt, fmt.Sprintf("≤ %g", startLimit), atMost(startLimit), ""},
		{"start → every ClusterIP in the kernel, the whole first sync (s)", "%.2f", func(r runResult) float64 { return r.AllProgrammed }, "", nil, ""},
		{"restart unchanged: map writes", "%.0f", func(r runResult) float64 { return r.Restart.MapWrites }, "0", atMost(0), ""},
		{"restart unchanged: nftables changes", "%.0f", func(r runResult) float64 { return float64(r.Restart.KernelChanges) }, "0", atMost(0), ""},
		{"proxy peak RSS + maps' memory (MiB)", "%.0f", func(r runResult) float64 { return float64(max(r.RSSPeak, r.Restart.RSS)+r.MapMemlockKiB) / mib }, "≤ 500 at 100k", atMost(500), ""},
	}
	if *flagServices <= 10000 {
		out = append(out,
			issueFigure{"one endpoint change, API → served at connect p50 (ebpf: the maps; others: the rules) (ms)", "%.1f", changeLive, "≤ 5", atMost(5), ""},
			issueFigure{"one endpoint change, API → nftables rules p50 (ms)", "%.1f", func(r runResult) float64 { return ms(r.Churn.KernelP50) }, "", nil, ""})
	}
	if *flagDPRefServices > 0 {
		out = append(out, issueFigure{fmt.Sprintf("new connections/s in %% of the %d-Service reference", *flagDPRefServices), "%.1f", refRatio, "≥ 95", atLeast(95), ""})
	}
	return out
}

// liveAt is start → every ClusterIP served at connect: in ebpf mode when
// the hooks' maps held them, in the others when the rules did.
func liveAt(r runResult) float64 {
	if r.Mode == "ebpf" {
		return r.MapLive
	}
	return r.AllProgrammed
}

// changeLive is an endpoint change's p50 to where a connect meets it: the
// hooks' maps in ebpf mode, the rules in the others.
func changeLive(r runResult) float64 {
	if r.Mode == "ebpf" {
		return ms(r.Churn.MapP50)
	}
	return ms(r.Churn.KernelP50)
}

// printIssueSummary prints the eBPF issue's figures: each mode's median
// side by side, ebpf mode's target and whether its median meets it.
func printIssueSummary(w io.Writer, results []runResult) {
	modes := modesOf(results)
	if !slices.Contains(modes, "ebpf") {
		return
	}
	fmt.Fprintf(w, "\nThe eBPF issue's figures at %d Services (medians; targets are ebpf mode's):\n\n", *flagServices)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "figure\t%s\ttarget\tmet\n", strings.Join(modes, "\t"))
	for _, f := range issueFigures() {
		medians := map[string]float64{}
		var cells []string
		for _, mode := range modes {
			var vals []float64
			for _, r := range results {
				if r.Mode == mode {
					vals = append(vals, f.value(r))
				}
			}
			m := median(vals)
			if !math.IsNaN(m) {
				medians[mode] = m
			}
			cells = append(cells, cell(f.format, m))
		}
		verdict := "–"
		_, needed := medians[f.needs]
		if v, ok := medians["ebpf"]; ok && f.met != nil && (f.needs == "" || needed) {
			verdict = map[bool]string{true: "yes", false: "NO"}[f.met(v, medians)]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.name, strings.Join(cells, "\t"), f.target, verdict)
	}
	tw.Flush()
}
