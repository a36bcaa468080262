package main

import (
	"fmt"
	"runtime"

	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

func report(cfg config, res []result) {
	fmt.Printf("## Node-port packet path (UDP, %d-byte frames, %d flows over %d node ports)\n\n",
		frameLen, int(cfg.flows)*cfg.targets, cfg.targets)
	fmt.Printf("%d CPUs; %d windows of %v per row, median [min … max]; CPU per packet from /proc/stat deltas "+
		"(softirq: the node's receive path; busy: all non-idle time, the sender's and the machine's other load included).\n\n",
		runtime.NumCPU(), cfg.runs, cfg.window)
	fmt.Println("| Services | mode | forwarded kpps | arrived kpps | softirq ns/pkt | busy ns/pkt | × nftables pps | × nftables softirq/pkt | × nftables pps per CPU | programming s |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	base := map[int]sample{}
	for _, r := range res {
		if r.mode == "nftables" {
			base[r.services] = medians(r.samples)
		}
	}
	for _, r := range res {
		if r.failed != "" {
			fmt.Printf("| %d | %s | not programmed after %.0f s: %s | | | | | | | |\n", r.services, r.mode, r.syncSecs, r.failed)
			continue
		}
		m := medians(r.samples)
		ratio, cpuRatio, perCPU := "—", "—", "—"
		if b, ok := base[r.services]; ok && b.Forwarded > 0 && m.SoftirqNS > 0 {
			ratio = fmt.Sprintf("%.2f", m.Forwarded/b.Forwarded)
			cpuRatio = fmt.Sprintf("%.2f", m.SoftirqNS/b.SoftirqNS)
			perCPU = fmt.Sprintf("%.2f", b.SoftirqNS/m.SoftirqNS)
		}
		fmt.Printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %.1f |\n", r.services, r.mode,
			stat(r.samples, func(s sample) float64 { return s.Forwarded / 1000 }),
			stat(r.samples, func(s sample) float64 { return s.Arrived / 1000 }),
			stat(r.samples, func(s sample) float64 { return s.SoftirqNS }),
			stat(r.samples, func(s sample) float64 { return s.BusyNS }),
			ratio, cpuRatio, perCPU, r.syncSecs)
	}
	verdict(res, base)
}

// reportConns prints the connections' table: medians of the windows,
// ratios to nftables' from the same run.
func reportConns(cfg config, res []result) {
	if cfg.conns == 0 {
		return
	}
	fmt.Printf("\n## New connections through a node port from outside (TCP: connect, one request, its answer, close)\n\n")
	fmt.Printf("%d connectors in the sender's namespace; %d windows of %v per row, median [min … max].\n\n", cfg.conns, cfg.runs, cfg.window)
	fmt.Println("| Services | mode | connections/s | failed/s | × nftables connections/s |")
	fmt.Println("|---:|---|---:|---:|---:|")
	perSec := func(c connSample) float64 { return c.PerSec }
	base := map[int]float64{}
	for _, r := range res {
		if r.mode == "nftables" && len(r.conns) > 0 {
			base[r.services] = benchkit.Summarize(column(r.conns, perSec)).Med
		}
	}
	for _, r := range res {
		if len(r.conns) == 0 {
			continue
		}
		ratio := "—"
		if b := base[r.services]; b > 0 {
			ratio = fmt.Sprintf("%.2f", benchkit.Summarize(column(r.conns, perSec)).Med/b)
		}
		fmt.Printf("| %d | %s | %s | %s | %s |\n", r.services, r.mode, stat(r.conns, perSec),
			stat(r.conns, func(c connSample) float64 { return c.Failed }), ratio)
	}
}

func column[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func stat[T any](xs []T, f func(T) float64) string {
	s := benchkit.Summarize(column(xs, f))
	return fmt.Sprintf("%.0f [%.0f … %.0f]", s.Med, s.Min, s.Max)
}

func medians(xs []sample) sample {
	med := func(f func(sample) float64) float64 { return benchkit.Summarize(column(xs, f)).Med }
	return sample{
		Forwarded: med(func(s sample) float64 { return s.Forwarded }),
		Arrived:   med(func(s sample) float64 { return s.Arrived }),
		SoftirqNS: med(func(s sample) float64 { return s.SoftirqNS }),
		BusyNS:    med(func(s sample) float64 { return s.BusyNS }),
	}
}

// verdict prints the XDP row against the target: packets/s per CPU at
// least three times nftables' at each scale (the ratio of their softirq
// time per packet), and packets/s flat from the smallest scale to the
// largest.
func verdict(res []result, base map[int]sample) {
	var xdp []result
	for _, r := range res {
		if r.mode == "ebpf-xdp" && r.failed == "" && len(r.samples) > 0 {
			xdp = append(xdp, r)
		}
	}
	if len(xdp) == 0 {
		return
	}
	fmt.Printf("\nXDP against nftables, packets/s at equal CPU (target ≥ 3×):")
	for _, r := range xdp {
		b, ok := base[r.services]
		m := medians(r.samples)
		if !ok || b.SoftirqNS == 0 || m.SoftirqNS == 0 {
			continue
		}
		x := b.SoftirqNS / m.SoftirqNS
		fmt.Printf(" %d Services %.2f× (%s);", r.services, x, met(x >= 3))
	}
	first, last := medians(xdp[0].samples), medians(xdp[len(xdp)-1].samples)
	if len(xdp) > 1 && first.Forwarded > 0 {
		fmt.Printf(" XDP packets/s at %d Services over %d: %.2f (target: flat)", xdp[len(xdp)-1].services, xdp[0].services, last.Forwarded/first.Forwarded)
	}
	fmt.Println()
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
