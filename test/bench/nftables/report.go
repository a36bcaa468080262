package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

// target is a goal from reference/peers-and-numbers.md §5 for one metric at
// one scale; zero scale means every scale.
type target struct {
	scale int
	limit float64
	text  string
}

var (
	coldTargets    = []target{{10000, 1000, "≤ 1 s"}, {50000, 10000, "≤ 10 s"}}
	changeTargets  = []target{{10000, 20, "≤ 20 ms"}}
	restartTargets = []target{{10000, 1000, "≤ 1 s"}}
	rewriteTargets = []target{{0, 0, "0"}}
	rssTargets     = []target{{10000, 150 * 1024, "≤ 150 MiB"}, {50000, 400 * 1024, "≤ 400 MiB (G7)"}}
)

func targetFor(ts []target, scale int) (target, bool) {
	for _, t := range ts {
		if t.scale == scale || t.scale == 0 {
			return t, true
		}
	}
	return target{}, false
}

func collect(rs []*Result, f func(*Result) []float64) benchkit.Stat {
	var xs []float64
	for _, r := range rs {
		xs = append(xs, f(r)...)
	}
	return benchkit.Summarize(xs)
}

func one(f func(*Result) Sample, g func(Sample) float64) func(*Result) []float64 {
	return func(r *Result) []float64 { return []float64{g(f(r))} }
}

func many(f func(*Result) []Sample, g func(Sample) float64) func(*Result) []float64 {
	return func(r *Result) []float64 {
		var out []float64
		for _, s := range f(r) {
			out = append(out, g(s))
		}
		return out
	}
}

func wall(s Sample) float64    { return s.WallMS }
func nftUser(s Sample) float64 { return s.NftUserMS }
func nftSys(s Sample) float64  { return s.NftSysMS }
func selfCPU(s Sample) float64 { return s.SelfUserMS + s.SelfSysMS }

// printReport writes the whole report as Markdown, for results to be
// quoted in docs/performance.md.
func printReport(w io.Writer, scales []int, results map[int][]*Result, failures map[int][]string, runs int) {
	fmt.Fprintf(w, "### nftables backend, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Machine: %s\n\n", benchkit.Machine("nft", "--version"))
	fmt.Fprintf(w, "%d run(s) per scale, each in a fresh network namespace; times in ms, median [min … max] over runs "+
		"(single changes: over runs × changes). nft user/sys = CPU of the nft child processes (sys ≈ kernel applying the "+
		"transaction); svcproxy CPU = user+sys of the benchmark process (render, diff).\n\n", runs)
	fmt.Fprintln(w, "| scenario | wall | nft user | nft sys | svcproxy CPU | target | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, n := range scales {
		rs := results[n]
		if len(rs) == 0 {
			fmt.Fprintf(w, "| %s × 10: all runs failed | | | | | | |\n", benchkit.ScaleName(n))
			continue
		}
		timedRow(w, "cold sync "+benchkit.ScaleName(n)+"×10", rs, func(r *Result) Sample { return r.Cold }, coldTargets, n)
		manyRow(w, "endpoint change @"+benchkit.ScaleName(n), rs, func(r *Result) []Sample { return r.EndpointChange }, changeTargets, n)
		manyRow(w, "service add @"+benchkit.ScaleName(n), rs, func(r *Result) []Sample { return r.ServiceAdd }, changeTargets, n)
		timedRow(w, "restart, unchanged @"+benchkit.ScaleName(n)+" (New+Init+Sync)", rs, func(r *Result) Sample { return r.Restart }, restartTargets, n)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scale | objects rewritten on restart | restart notifications (nf_tables) | peak RSS svcproxy (after cold / end; the restart's own³) | peak RSS nft¹ | in all² | target RSS | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, n := range scales {
		if rs := results[n]; len(rs) > 0 {
			resourceRow(w, n, rs)
		}
	}
	fmt.Fprintln(w, "\n¹ the largest maxrss of the nft processes, measured by a small shim that runs them "+
		"(nftshim.go): at most max(nft's own peak, the shim's few MiB).\n"+
		"² svcproxy's peak plus nft's, per run: an upper bound, as the two peaks need not coincide.\n"+
		"³ the peak of the restart alone (New, read-back, full sync), its high-water mark reset before it, after the "+
		"old Proxier was dropped and the free heap returned to the kernel; \"from\" is the resident set it started from.")
	for _, n := range scales {
		for _, f := range failures[n] {
			fmt.Fprintf(w, "\nFailure at %s: %s\n", benchkit.ScaleName(n), f)
		}
	}
}

func timedRow(w io.Writer, name string, rs []*Result, f func(*Result) Sample, ts []target, n int) {
	row(w, name, collect(rs, one(f, wall)), collect(rs, one(f, nftUser)), collect(rs, one(f, nftSys)), collect(rs, one(f, selfCPU)), ts, n)
}

func manyRow(w io.Writer, name string, rs []*Result, f func(*Result) []Sample, ts []target, n int) {
	row(w, name, collect(rs, many(f, wall)), collect(rs, many(f, nftUser)), collect(rs, many(f, nftSys)), collect(rs, many(f, selfCPU)), ts, n)
}

func row(w io.Writer, name string, wallS, user, sys, self benchkit.Stat, ts []target, n int) {
	t, ok := targetFor(ts, n)
	tText, met := "", ""
	if ok {
		tText, met = t.text, benchkit.Verdict(wallS.Med <= t.limit)
	}
	fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.0f | %s | %s |\n", name, benchkit.FmtStat(wallS), user.Med, sys.Med, self.Med, tText, met)
}

func resourceRow(w io.Writer, n int, rs []*Result) {
	rewritten := collect(rs, func(r *Result) []float64 { return []float64{float64(rewrites(r.RestartEvents))} })
	hwmCold := collect(rs, func(r *Result) []float64 { return []float64{float64(r.SelfHWMColdKiB)} })
	hwm := collect(rs, func(r *Result) []float64 { return []float64{float64(r.SelfHWMKiB)} })
	hwmRestart := collect(rs, func(r *Result) []float64 { return []float64{float64(r.SelfHWMRestartKiB)} })
	preRestart := collect(rs, func(r *Result) []float64 { return []float64{float64(r.SelfRSSPreRestart)} })
	nft := collect(rs, func(r *Result) []float64 { return []float64{float64(r.NftMaxRSSKiB)} })
	all := collect(rs, func(r *Result) []float64 {
		return []float64{float64(max(r.SelfHWMKiB, r.SelfHWMColdKiB) + r.NftMaxRSSKiB)}
	})
	t, ok := targetFor(rssTargets, n)
	tText, met := "", ""
	if ok {
		tText, met = t.text, benchkit.Verdict(all.Med <= t.limit)
	}
	rw, _ := targetFor(rewriteTargets, n)
	nftText := fmt.Sprintf("%.0f MiB", nft.Med/1024)
	if nft.Max == 0 {
		nftText = "not measured (-nftrss=false)"
	}
	fmt.Fprintf(w, "| %s×10 | %.0f (target %s: %s) | %s | %.0f / %.0f MiB; %.0f MiB [%.0f … %.0f] from %.0f | %s | %.0f MiB [%.0f … %.0f] | %s | %s |\n",
		benchkit.ScaleName(n), rewritten.Med, rw.text, benchkit.Verdict(rewritten.Max <= rw.limit), eventSummary(rs[0].RestartEvents),
		hwmCold.Med/1024, hwm.Med/1024, hwmRestart.Med/1024, hwmRestart.Min/1024, hwmRestart.Max/1024, preRestart.Med/1024,
		nftText, all.Med/1024, all.Min/1024, all.Max/1024, tText, met)
}

// rewrites counts the monitor events that change the dataplane: anything
// done to a rule or an element, and any delete or flush. Re-declaring an
// existing table, chain, set or map ("add chain" with no change) is not.
func rewrites(events map[string]int) int {
	n := 0
	for k, v := range events {
		verb, obj, _ := strings.Cut(k, " ")
		if obj == "rule" || obj == "element" || verb == "delete" || verb == "flush" {
			n += v
		}
	}
	return n
}

func eventSummary(events map[string]int) string {
	if len(events) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(events)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, events[k]))
	}
	return strings.Join(parts, ", ")
}
