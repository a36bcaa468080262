//go:build benche2e

package bench

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
)

// row is one line of the report: a measure taken from every run.
type row struct {
	name   string
	format string // for one value
	value  func(r runResult) float64
}

const mib = 1024.0

func rows(children []string) []row {
	out := []row{
		{"start → end of the first sync (s)", "%.2f", func(r runResult) float64 { return r.FirstSync }},
		{"start → end of the sync that programmed all (s)", "%.2f", func(r runResult) float64 { return r.AllProgrammed }},
		{"syncs until all were programmed", "%.0f", func(r runResult) float64 { return r.SyncsToAll }},
		{"ClusterIPs in the kernel, svcproxy idle", "%.0f", func(r runResult) float64 { return float64(r.KernelIPs) }},
		{"ClusterIPs the API lists", "%.0f", func(r runResult) float64 { return float64(r.WantIPs) }},
		{"programming latency p50, bucket bound (s)", "%.2f", func(r runResult) float64 { return r.Churn.P50Bound }},
		{"programming latency p99, bucket bound (s)", "%.2f", func(r runResult) float64 { return r.Churn.P99Bound }},
		{"programming latency p50, interpolated (s)", "%.3f", func(r runResult) float64 { return r.Churn.P50Interp }},
		{"programming latency p99, interpolated (s)", "%.3f", func(r runResult) float64 { return r.Churn.P99Interp }},
		{"programming latency mean, sum/count (ms)", "%.0f", func(r runResult) float64 { return ms(r.Churn.Mean) }},
		{"per change p50, from sync end stamps (ms)", "%.0f", func(r runResult) float64 { return ms(r.Churn.TraceP50) }},
		{"per change p99, from sync end stamps (ms)", "%.0f", func(r runResult) float64 { return ms(r.Churn.TraceP99) }},
		{"per change max, from sync end stamps (ms)", "%.0f", func(r runResult) float64 { return ms(r.Churn.TraceMax) }},
		{"churn updates sent (API errors excluded)", "%.0f", func(r runResult) float64 { return float64(r.Churn.Sent) }},
		{"churn updates observed in the histogram", "%.0f", func(r runResult) float64 { return float64(r.Churn.Observed) }},
		{"svcproxy peak RSS after first sync (MiB)", "%.0f", func(r runResult) float64 { return float64(r.RSSAfterFirstSync) / mib }},
		{"svcproxy peak RSS, whole run (MiB)", "%.0f", func(r runResult) float64 { return float64(r.RSSPeak) / mib }},
	}
	for _, name := range children {
		out = append(out, row{"child " + name + " peak RSS, sampled (MiB)", "%.0f", func(r runResult) float64 {
			for _, c := range r.Children {
				if c.Name == name {
					return float64(c.HWMKiB) / mib
				}
			}
			return math.NaN()
		}})
	}
	return append(out,
		row{"wait4 maxrss: svcproxy or largest child (MiB)", "%.0f", func(r runResult) float64 { return float64(r.WaitMaxRSS) / mib }},
		row{"cluster up from the seed (s)", "%.1f", func(r runResult) float64 { return r.ClusterUp }},
		row{"load average (1 min) before run", "%.2f", func(r runResult) float64 { return r.Load1Before }},
		row{"load average (1 min) after run", "%.2f", func(r runResult) float64 { return r.Load1After }},
	)
}

// printReport prints one table: per mode and measure the median and every
// run's value, then what the measures mean.
func printReport(w io.Writer, results []runResult) {
	fmt.Fprintf(w, "\nbench-e2e: %d Services × %d endpoints through the API; churn %d updates at %g/s; minSyncPeriod %s; %d CPUs\n\n",
		*flagServices, *flagEndpoints, *flagChanges, *flagRate, orDefault(*flagMinSync), runtime.NumCPU())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tmode\tmedian\truns")
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rw.name, mode, cell(rw.format, median(vals)), strings.Join(cells, ", "))
		}
	}
	tw.Flush()
	fmt.Fprint(w, legend)
}

const legend = `
First sync: from just before svcproxy's exec to the end of its first successful sync, as svcproxy
stamps it in kubeproxy_sync_proxy_rules_last_timestamp_seconds (polled every 50 ms).
Programmed all: once svcproxy has made no sync for 5 s, the kernel is dumped (nft list table /
iptables-save) and the API's ClusterIPs are counted in it; with no sync during the dump, the time is
the end of the last sync before it. Nothing changes in the API meanwhile, so more than one sync
means the first sync ran before svcproxy had received every listed Service.
Programming latency: kubeproxy_network_programming_duration_seconds, delta of the histogram
scraped before and after the churn (trigger time = just before each update's API write; end =
end of the sync that consumed it). The buckets are 0.25 s wide below 1 s: "bucket bound" is
the le of the bucket holding the quantile (an upper bound), "interpolated" is
histogram_quantile's linear guess inside it, the mean is exact. "Per change": svcproxy scraped every
20 ms during the churn; each update's latency is the end stamp of the sync after which the
histogram's count covered it, minus its trigger time (nearest-rank quantiles; late by at most one
sync when two syncs end within one scrape).
RSS: VmHWM of svcproxy; children (nft, iptables-restore) sampled every 20 ms from /proc (lower
bound: short-lived ones are missed); wait4 maxrss is an upper bound for the largest child.
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

func modesOf(results []runResult) []string {
	var out []string
	for _, r := range results {
		if len(out) == 0 || out[len(out)-1] != r.Mode {
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
