package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

// Upstream kube-proxy v1.37.1's iptables mode on this cluster shape, and
// the target, for the rows where they are known.
var (
	upstreamCold   = map[int]string{1000: "4.0–4.3 s", 10000: "> 15 min (nft: restore unfinished)"}
	upstreamChange = map[int]string{1000: "126–141 ms"}
	coldTarget     = map[int]float64{10000: 60000}
)

func wallsOf(ss []Sample) []float64 {
	var out []float64
	for _, s := range ss {
		out = append(out, s.WallMS)
	}
	return out
}

// phase picks the samples of one scenario from a result.
type phase struct {
	name string
	of   func(*Result) []Sample
}

var phases = []phase{
	{"cold sync", func(r *Result) []Sample { return []Sample{r.Cold} }},
	{"endpoint change (partial restore)", func(r *Result) []Sample { return r.EndpointChange }},
	{"restart, unchanged (New+Init+full Sync)", func(r *Result) []Sample { return []Sample{r.Restart} }},
}

// over gathers f of every sample of phase p over all results.
func over(rs []*Result, p phase, f func(Sample) float64) benchkit.Stat {
	var xs []float64
	for _, r := range rs {
		for _, s := range p.of(r) {
			xs = append(xs, f(s))
		}
	}
	return benchkit.Summarize(xs)
}

// printReport writes the whole report as Markdown, for results to be
// quoted in docs/performance.md.
func printReport(w io.Writer, cfg config, results map[key][]*Result, failures map[key][]string) {
	fmt.Fprintf(w, "### iptables backend, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Machine: %s\n\n", benchkit.Machine("iptables-legacy", "--version"))
	fmt.Fprintf(w, "%d run(s) per flavour and scale, each in a fresh network namespace; services × %d endpoints, IPv4; "+
		"times in ms, median [min … max] over runs (endpoint changes: over runs × %d changes). iptables CPU = user/sys "+
		"of the iptables child processes (sys ≈ the kernel applying the rules); svcproxy CPU = user+sys of the "+
		"benchmark process (render, diff).\n\n", cfg.runs, benchkit.EndpointsPerService, cfg.changes)
	timingTable(w, cfg, results)
	rulesTable(w, cfg, results)
	profileTable(w, cfg, results)
	for _, fl := range cfg.flavours {
		for _, n := range cfg.scales {
			for _, f := range failures[key{fl, n}] {
				fmt.Fprintf(w, "\nFailure, iptables-%s at %s: %s\n", fl, benchkit.ScaleName(n), f)
			}
		}
	}
}

func timingTable(w io.Writer, cfg config, results map[key][]*Result) {
	fmt.Fprintln(w, "| flavour | scenario | wall | iptables CPU user / sys | svcproxy CPU | upstream v1.37.1 | target | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, fl := range cfg.flavours {
		for _, n := range cfg.scales {
			rs := results[key{fl, n}]
			if len(rs) == 0 {
				fmt.Fprintf(w, "| %s | %s×10: all runs failed | | | | | | |\n", fl, benchkit.ScaleName(n))
				continue
			}
			for i, p := range phases {
				wallS := over(rs, p, func(s Sample) float64 { return s.WallMS })
				user := over(rs, p, func(s Sample) float64 { return s.ChildUserMS })
				sys := over(rs, p, func(s Sample) float64 { return s.ChildSysMS })
				self := over(rs, p, func(s Sample) float64 { return s.SelfUserMS + s.SelfSysMS })
				upstream, target, met := "", "", ""
				switch i {
				case 0:
					upstream = upstreamCold[n]
					if limit, ok := coldTarget[n]; ok {
						target, met = fmt.Sprintf("< %.0f s", limit/1000), benchkit.Verdict(wallS.Med < limit)
					}
				case 1:
					upstream = upstreamChange[n]
				}
				fmt.Fprintf(w, "| %s | %s @%s×10 | %s | %.0f / %.0f | %.0f | %s | %s | %s |\n",
					fl, p.name, benchkit.ScaleName(n), benchkit.FmtStat(wallS), user.Med, sys.Med, self.Med, upstream, target, met)
			}
		}
	}
	fmt.Fprintln(w)
}

// rulesTable shows what was programmed and the memory it took: the rules
// must be byte-identical on both flavours and across a restart.
func rulesTable(w io.Writer, cfg config, results map[key][]*Result) {
	fmt.Fprintln(w, "| flavour | scale | rules (all tables) | same rules as the other flavour | rules changed by restart | "+
		"peak RSS svcproxy (after cold / end) | peak RSS iptables child (cold sync / whole run) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, fl := range cfg.flavours {
		for _, n := range cfg.scales {
			rs := results[key{fl, n}]
			if len(rs) == 0 {
				continue
			}
			changed := 0
			for _, r := range rs {
				if r.BeforeRestart != r.AfterRestart {
					changed++
				}
			}
			kib := func(f func(*Result) int64) float64 {
				var xs []float64
				for _, r := range rs {
					xs = append(xs, float64(f(r)))
				}
				return benchkit.Summarize(xs).Med / 1024
			}
			fmt.Fprintf(w, "| %s | %s×10 | %d | %s | %s | %.0f / %.0f MiB | %.0f / %.0f MiB |\n",
				fl, benchkit.ScaleName(n), rs[0].Rules, sameAcrossFlavours(results, fl, n), restartVerdict(changed, len(rs)),
				kib(func(r *Result) int64 { return r.SelfHWMColdKiB }), kib(func(r *Result) int64 { return r.SelfHWMKiB }),
				kib(func(r *Result) int64 { return r.ChildMaxRSSColdKiB }), kib(func(r *Result) int64 { return r.ChildMaxRSSKiB }))
		}
	}
	fmt.Fprintln(w)
}

// sameAcrossFlavours compares the cold-sync digests of every run of fl
// with every run of the other flavour at the same scale.
func sameAcrossFlavours(results map[key][]*Result, fl kiptables.Flavour, n int) string {
	other := kiptables.FlavourLegacy
	if fl == other {
		other = kiptables.FlavourNFT
	}
	theirs := results[key{other, n}]
	if len(theirs) == 0 {
		return "(not measured)"
	}
	for _, a := range results[key{fl, n}] {
		for _, b := range theirs {
			if a.ColdDigest != b.ColdDigest {
				return fmt.Sprintf("**no** (%s ≠ %s)", a.ColdDigest, b.ColdDigest)
			}
		}
	}
	return "yes (sha256 " + theirs[0].ColdDigest + "…)"
}

func restartVerdict(changed, runs int) string {
	if changed == 0 {
		return "none (0 of " + fmt.Sprint(runs) + " runs)"
	}
	return fmt.Sprintf("**changed in %d of %d runs**", changed, runs)
}

// profileTable splits each scenario's wall time by kind of iptables call
// at the largest scale; what is left is svcproxy's own work.
func profileTable(w io.Writer, cfg config, results map[key][]*Result) {
	n := slices.Max(cfg.scales)
	fmt.Fprintf(w, "Where the time goes at %s×10 (medians, ms; restore input in MiB):\n\n", benchkit.ScaleName(n))
	fmt.Fprintln(w, "| flavour | scenario | wall | iptables-restore wall (user / sys) | restore input | iptables-save wall (calls) | "+
		"jump and canary listing wall (calls) | single-rule calls wall (calls; a chain check on nft is netlink, no tool) | svcproxy own |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, fl := range cfg.flavours {
		rs := results[key{fl, n}]
		for _, p := range phases {
			if len(rs) == 0 {
				continue
			}
			op := func(name string, f func(OpStat) float64) float64 {
				return over(rs, p, func(s Sample) float64 { return f(s.Ops[name]) }).Med
			}
			wallMed := over(rs, p, func(s Sample) float64 { return s.WallMS }).Med
			own := over(rs, p, func(s Sample) float64 {
				rest := s.WallMS
				for _, o := range s.Ops {
					rest -= o.WallMS
				}
				return rest
			}).Med
			fmt.Fprintf(w, "| %s | %s | %s | %s (%.0f / %.0f) | %.1f | %s (%.0f) | %s (%.0f) | %s (%.0f) | %s |\n", fl, p.name, benchkit.FmtMS(wallMed),
				benchkit.FmtMS(op("restore", opWall)), op("restore", opUser), op("restore", opSys),
				op("restore", func(o OpStat) float64 { return float64(o.InBytes) })/(1<<20),
				benchkit.FmtMS(op("save", opWall)), op("save", opCalls),
				benchkit.FmtMS(op("listing", opWall)), op("listing", opCalls),
				benchkit.FmtMS(op("single-rule tools", opWall)), op("single-rule tools", opCalls), benchkit.FmtMS(own))
		}
	}
	fmt.Fprintln(w)
}

func opWall(o OpStat) float64  { return o.WallMS }
func opUser(o OpStat) float64  { return o.ChildUserMS }
func opSys(o OpStat) float64   { return o.ChildSysMS }
func opCalls(o OpStat) float64 { return float64(o.Calls) }
