// Command nodeport measures the node-port packet path from outside the
// node: a sender namespace transmits UDP to a node port of a node
// namespace, which forwards it to an endpoint namespace, for each way
// svcproxy can program the node (nftables, iptables, the ebpf tc
// programs, and those with XDP in front) at each scale of Services. It prints packets/s forwarded and
// CPU time per packet. Needs root; everything lives in namespaces it
// creates and removes.
//
// The sender is an XDP program run with BPF_PROG_RUN in live-frame mode
// (the kernel has no pktgen here): it writes a random source port
// (-flows of them) and one of -targets node ports into each frame and
// transmits it into the node's link. The endpoint's link counts and drops
// what arrives with an XDP program. The node namespace is programmed from
// a State directly (benchkit's cluster, the targets turned into UDP
// Services), as the backends' own benchmarks do, not by the daemon.
//
// Then new connections/s through a node port from outside: -conns
// connectors in the sender's namespace open a TCP connection to a node
// port, send one line, read the endpoint's echo and close, over and over
// (conns.go); the echo server listens in the endpoint's namespace.
//
//	go run ./test/bench/nodeport                       # 1k and 50k Services, 5 windows each
//	go run ./test/bench/nodeport -scales 1000 -runs 3  # a smoke run
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

func main() { os.Exit(run()) }

type config struct {
	scales        []int
	modes         []mode
	runs, targets int
	// conns is how many connectors measure connections (0: none).
	conns        int
	flows        uint16
	warm, window time.Duration
}

func run() int {
	var (
		scales  = flag.String("scales", "1000,50000", "comma-separated Service counts")
		only    = flag.String("modes", "nftables,iptables,ebpf-tc,ebpf-xdp", "comma-separated modes to measure")
		flavour = flag.String("iptables", "nft", "iptables flavour (nft or legacy)")
		runs    = flag.Int("runs", 5, "measurement windows per mode and scale; the table shows median [min … max]")
		window  = flag.Duration("window", 2*time.Second, "length of a window")
		warm    = flag.Duration("warm", 500*time.Millisecond, "sending before each window (the first packets of the flows create their table entries)")
		flows   = flag.Int("flows", 1024, "source ports (a power of two); flows are these × targets")
		targets = flag.Int("targets", 16, "node ports addressed (a power of two)")
		conns   = flag.Int("conns", 64, "parallel connectors measuring new TCP connections/s through a node port (0: none)")
	)
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "needs root (network namespaces, BPF, nft, iptables)")
		return 1
	}
	cfg := config{runs: *runs, targets: *targets, conns: *conns, flows: uint16(*flows), warm: *warm, window: *window}
	var err error
	if cfg.scales, err = benchkit.ParseScales(*scales, benchkit.MaxServices); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if !pow2(*flows) || *flows > 1<<15 || !pow2(*targets) || *targets > 1024 {
		fmt.Fprintln(os.Stderr, "-flows (≤ 32768) and -targets (≤ 1024) must be powers of two")
		return 2
	}
	for _, m := range modes(kiptables.Flavour(*flavour)) {
		if strings.Contains(","+*only+",", ","+m.name+",") {
			cfg.modes = append(cfg.modes, m)
		}
	}
	undoOnSignal()
	res, err := measureAll(cfg)
	report(cfg, res)
	reportConns(cfg, res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed:", err)
		return 1
	}
	return 0
}

func pow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// result is one mode at one scale.
type result struct {
	mode     string
	services int
	syncSecs float64
	samples  []sample
	conns    []connSample
	// failed says why the node could not be programmed.
	failed string
}

// measureAll measures each scale with every mode's topology in place at
// once, taking the windows in turn (one of each mode, then again), so that
// the machine's other load falls on all modes alike.
func measureAll(cfg config) ([]result, error) {
	var out []result
	for _, n := range cfg.scales {
		res, err := measureScale(cfg, n)
		out = append(out, res...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func measureScale(cfg config, n int) ([]result, error) {
	st, err := benchState(n, cfg.targets)
	if err != nil {
		return nil, err
	}
	res := make([]result, len(cfg.modes))
	topos := make([]*topo, len(cfg.modes))
	defer func() {
		for _, t := range topos {
			if t != nil {
				t.close()
			}
		}
	}()
	for i, m := range cfg.modes {
		fmt.Fprintf(os.Stderr, "%d Services: programming %s\n", n, m.name)
		res[i] = result{mode: m.name, services: n}
		if topos[i], err = newTopo(cfg.targets, cfg.flows); err != nil {
			return nil, err
		}
		start := time.Now()
		remove, err := m.program(topos[i], st)
		res[i].syncSecs = time.Since(start).Seconds()
		if remove != nil {
			defer remove()
		}
		if err != nil {
			// A backend that cannot program this scale (a restore's
			// timeout) is reported, and the others measured.
			fmt.Fprintf(os.Stderr, "%s at %d Services: program the node: %v\n", m.name, n, err)
			res[i].failed = err.Error()
		}
	}
	for r := 0; r < cfg.runs; r++ {
		fmt.Fprintf(os.Stderr, "%d Services: window %d/%d\n", n, r+1, cfg.runs)
		for i, t := range topos {
			if res[i].failed != "" {
				continue
			}
			s, err := t.measure(1, cfg.warm, cfg.window)
			if err != nil {
				return res[:i], fmt.Errorf("%s at %d Services: %w", res[i].mode, n, err)
			}
			res[i].samples = append(res[i].samples, s...)
		}
	}
	connWindows(cfg, n, topos, res)
	return res, nil
}

// connWindows measures new connections/s through each mode's node,
// taking the windows in turn as the packets' are.
func connWindows(cfg config, n int, topos []*topo, res []result) {
	if cfg.conns == 0 {
		return
	}
	for r := 0; r < cfg.runs; r++ {
		fmt.Fprintf(os.Stderr, "%d Services: connections, window %d/%d\n", n, r+1, cfg.runs)
		for i, t := range topos {
			if res[i].failed == "" {
				res[i].conns = append(res[i].conns, t.measureConns(cfg.conns, cfg.targets, 1, cfg.warm, cfg.window)...)
			}
		}
	}
}
