package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
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

// stat is median, min and max of a metric over all samples.
type stat struct{ med, min, max float64 }

func summarize(xs []float64) stat {
	if len(xs) == 0 {
		return stat{}
	}
	s := slices.Sorted(slices.Values(xs))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{med: med, min: s[0], max: s[len(s)-1]}
}

func collect(rs []*Result, f func(*Result) []float64) stat {
	var xs []float64
	for _, r := range rs {
		xs = append(xs, f(r)...)
	}
	return summarize(xs)
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

// printReport writes the whole report as Markdown, ready for
// docs/performance.md.
func printReport(w io.Writer, scales []int, results map[int][]*Result, failures map[int][]string, runs int) {
	fmt.Fprintf(w, "### nftables backend, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Machine: %s\n\n", machine())
	fmt.Fprintf(w, "%d run(s) per scale, each in a fresh network namespace; times in ms, median [min … max] over runs "+
		"(single changes: over runs × changes). nft user/sys = CPU of the nft child processes (sys ≈ kernel applying the "+
		"transaction); svcproxy CPU = user+sys of the benchmark process (render, diff).\n\n", runs)
	fmt.Fprintln(w, "| scenario | wall | nft user | nft sys | svcproxy CPU | target | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, n := range scales {
		rs := results[n]
		if len(rs) == 0 {
			fmt.Fprintf(w, "| %s × 10: all runs failed | | | | | | |\n", scaleName(n))
			continue
		}
		timedRow(w, "cold sync "+scaleName(n)+"×10", rs, func(r *Result) Sample { return r.Cold }, coldTargets, n)
		manyRow(w, "endpoint change @"+scaleName(n), rs, func(r *Result) []Sample { return r.EndpointChange }, changeTargets, n)
		manyRow(w, "service add @"+scaleName(n), rs, func(r *Result) []Sample { return r.ServiceAdd }, changeTargets, n)
		timedRow(w, "restart, unchanged @"+scaleName(n)+" (New+Init+Sync)", rs, func(r *Result) Sample { return r.Restart }, restartTargets, n)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scale | objects rewritten on restart | restart notifications (nf_tables) | peak RSS svcproxy (after cold / end) | peak RSS nft child, upper bound¹ | target RSS | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, n := range scales {
		if rs := results[n]; len(rs) > 0 {
			resourceRow(w, n, rs)
		}
	}
	fmt.Fprintln(w, "\n¹ getrusage(RUSAGE_CHILDREN) maxrss: Linux charges a vforked child with its parent's "+
		"RSS until exec, so this is max(nft's own peak, the benchmark's RSS when it forked).")
	for _, n := range scales {
		for _, f := range failures[n] {
			fmt.Fprintf(w, "\nFailure at %s: %s\n", scaleName(n), f)
		}
	}
}

func timedRow(w io.Writer, name string, rs []*Result, f func(*Result) Sample, ts []target, n int) {
	row(w, name, collect(rs, one(f, wall)), collect(rs, one(f, nftUser)), collect(rs, one(f, nftSys)), collect(rs, one(f, selfCPU)), ts, n)
}

func manyRow(w io.Writer, name string, rs []*Result, f func(*Result) []Sample, ts []target, n int) {
	row(w, name, collect(rs, many(f, wall)), collect(rs, many(f, nftUser)), collect(rs, many(f, nftSys)), collect(rs, many(f, selfCPU)), ts, n)
}

func row(w io.Writer, name string, wallS, user, sys, self stat, ts []target, n int) {
	t, ok := targetFor(ts, n)
	tText, met := "", ""
	if ok {
		tText, met = t.text, verdict(wallS.med <= t.limit)
	}
	fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.0f | %s | %s |\n", name, fmtStat(wallS), user.med, sys.med, self.med, tText, met)
}

func resourceRow(w io.Writer, n int, rs []*Result) {
	rewritten := collect(rs, func(r *Result) []float64 { return []float64{float64(rewrites(r.RestartEvents))} })
	hwmCold := collect(rs, func(r *Result) []float64 { return []float64{float64(r.SelfHWMColdKiB)} })
	hwm := collect(rs, func(r *Result) []float64 { return []float64{float64(r.SelfHWMKiB)} })
	nft := collect(rs, func(r *Result) []float64 { return []float64{float64(r.NftMaxRSSKiB)} })
	t, ok := targetFor(rssTargets, n)
	tText, met := "", ""
	if ok {
		tText, met = t.text, verdict(hwm.med <= t.limit)
	}
	rw, _ := targetFor(rewriteTargets, n)
	fmt.Fprintf(w, "| %s×10 | %.0f (target %s: %s) | %s | %.0f / %.0f MiB | %.0f MiB | %s | %s |\n",
		scaleName(n), rewritten.med, rw.text, verdict(rewritten.max <= rw.limit), eventSummary(rs[0].RestartEvents),
		hwmCold.med/1024, hwm.med/1024, nft.med/1024, tText, met)
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

func fmtStat(s stat) string {
	return fmt.Sprintf("%s [%s … %s]", fmtMS(s.med), fmtMS(s.min), fmtMS(s.max))
}

func fmtMS(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func verdict(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func scaleName(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// machine describes where the numbers were taken.
func machine() string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	nft, _ := exec.Command("nft", "--version").Output()
	return fmt.Sprintf("%s, %d CPUs, kernel %s, %s, %s", cpu, runtime.NumCPU(),
		strings.TrimSpace(string(kernel)), strings.TrimSpace(string(nft)), runtime.Version())
}
