package backends

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/localapi"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ebpfSyncFailures counts ebpf mode's failed syncs (either half's).
var ebpfSyncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "svcproxy_ebpf_sync_failures_total",
	Help: "Cumulative syncs that failed in ebpf mode, in the socket hooks' maps or in the nftables rules.",
}, []string{metrics.LabelIPFamily})

// ebpfBackend is ebpf mode's row. The socket hooks translate what a
// process in the cgroup connects to; they never see packets from other
// nodes, nor processes outside the cgroup, which the nftables rules serve
// as in nftables mode, rendered from the same State. A connection the
// hooks translated already goes to the endpoint and matches no Service
// rule.
var ebpfBackend = Backend{
	Mode:     proxy.ModeEBPF,
	Families: nftablesBackend.Families,
	Check: func(cfg *config.Config) (*Warning, error) {
		if err := ebpf.CheckHost(); err != nil {
			return nil, err
		}
		if cfg == nil {
			return nil, nil
		}
		accel, err := nodeport.ParseAcceleration(cfg.BPFAcceleration)
		if err != nil {
			return nil, fmt.Errorf("--bpf-acceleration: %w", err)
		}
		if accel != nodeport.AccelerationDisabled && len(cfg.BPFTCInterfaces) == 0 {
			return nil, fmt.Errorf("--bpf-acceleration=%s accelerates the tc programs, which --bpf-tc-interfaces turns on", accel)
		}
		if len(cfg.BPFTCInterfaces) > 0 {
			return nil, ebpf.CheckTCHost()
		}
		return nil, nil
	},
	Open:            openEBPF,
	Decide:          nftablesBackend.Decide,
	RemoveLeftovers: removeEBPFLeftovers,
	// Its packet path is nftables mode's tables, kept.
	KeepsLeftoversOf: []proxy.Mode{proxy.ModeNFTables},
	Objects:          ebpfObjects,
	SyncFailures:     ebpfSyncFailures,
	// The connect-time path's own time and latency (syncer.EarlyServer).
	Metrics: []prometheus.Collector{ebpfSyncFailures, proxymetrics.EarlyServedLastTimestamp, proxymetrics.EarlyProgrammingLatency},
}

// stateDir holds what svcproxy mounts for itself (beside the local API's
// socket).
var stateDir = filepath.Dir(localapi.DefaultPath)

func openEBPF(ctx context.Context, env Env) (*Instance, error) {
	cgroup, err := cgroupRoot(ctx, env.Config.BPFCgroupRoot)
	if err != nil {
		return nil, err
	}
	pinDir := env.Config.BPFPinDir
	if pinDir == "" {
		pinDir = ebpf.DefaultPinDir
	}
	if err := ebpf.EnsurePinDir(pinDir); err != nil {
		return nil, err
	}
	inst, err := openNFTables(ctx, env)
	if err != nil {
		return nil, err
	}
	hooks := map[proxy.IPFamily]*ebpf.Proxier{}
	inst.StaleFlows = map[proxy.IPFamily][]StaleFlows{}
	// One tc Proxier serves both families: one set of programs on the
	// interfaces, each family's maps synced from its own State.
	tc, err := openTC(pinDir, env.Config.BPFTCInterfaces, env.Config.BPFAcceleration)
	if err != nil {
		inst.Close()
		return nil, err
	}
	if tc != nil {
		inst.OnClose(tc.Close)
		inst.Metrics = append(inst.Metrics, metrics.WithFamilies(tcDropsCollector{tc, env.Families}))
	}
	for _, f := range env.Families {
		p, err := ebpf.New(f, ebpf.Options{PinDir: pinDir, Cgroup: cgroup, SocketEntries: env.Config.BPFSocketEntries})
		if err != nil {
			inst.Close()
			return nil, err
		}
		inst.OnClose(p.Close)
		hooks[f] = p
		// A socket the hooks sent to an endpoint keeps it as a DNATed
		// flow does: the conntrack cleanup's rule destroys it.
		inst.StaleFlows[f] = []StaleFlows{{Table: p.Sockets(), Name: "ebpf sockets"}}
		nft := inst.Proxiers[f]
		both := &hooksAndRules{family: f, hooks: p, rules: nft.Proxier, held: nft.PortHolder, tc: tc}
		if tc != nil {
			inst.StaleFlows[f] = append(inst.StaleFlows[f], StaleFlows{Table: tc.Flows(), Name: "ebpf tc flows"})
			inst.Metrics = append(inst.Metrics, metrics.WithFamilies(newTCFlowsCollector(tc.Flows(), f)))
		}
		// Ahead of the first sync, while the lists arrive, the nftables
		// half reads its tables back and says whether they held rules,
		// and the hooks load, attach and read their maps back
		// (ReadBack), creating new maps at the size the initial lists'
		// first pages promise (ExpectSize). Which ports the kernel holds is
		// the nftables half's answer (HeldPorts).
		both.prep = nft.Preparer
		inst.Proxiers[f] = syncer.Backend{Proxier: both, Preparer: both, RulesHolder: nft.RulesHolder, PortHolder: both,
			EarlyServer: both, Sizer: both}
	}
	klog.FromContext(ctx).Info("ebpf mode: socket hooks", "cgroup", cgroup, "pinDir", pinDir,
		"tcInterfaces", env.Config.BPFTCInterfaces, "acceleration", env.Config.BPFAcceleration)
	warnAcceleratedVeths(ctx, env.Config)
	inst.Metrics = append(inst.Metrics, metrics.WithFamilies(newEBPFCollector(hooks)))
	return inst, nil
}

// warnAcceleratedVeths names each veth XDP acceleration runs on: there
// what it forwards depends on the peer, which svcproxy cannot see
// (user/troubleshooting.md says what to do).
func warnAcceleratedVeths(ctx context.Context, cfg *config.Config) {
	if accel, err := nodeport.ParseAcceleration(cfg.BPFAcceleration); err != nil || accel == nodeport.AccelerationDisabled {
		return
	}
	for _, iface := range nodeport.Veths(cfg.BPFTCInterfaces) {
		klog.FromContext(ctx).Info("XDP acceleration on a veth: a sender on this machine that leaves checksums to offload is served by tc, and the peer must run an XDP program to take what XDP sends back",
			"interface", iface)
	}
}

// cgroupRoot is the cgroup the hooks attach to: the configured one, else
// the host's cgroup v2 root, else one mounted under the state directory.
func cgroupRoot(ctx context.Context, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if root, err := ebpf.Cgroup2Mount(); err == nil {
		return root, nil
	}
	dir := filepath.Join(stateDir, "cgroup2")
	klog.FromContext(ctx).Info("No cgroup v2 mount on this host; mounting one", "path", dir)
	return dir, ebpf.MountCgroup2(dir)
}

// removeEBPFLeftovers detaches and unpins what ebpf mode left in the pin
// directory (--bpf-pin-dir, which every mode accepts, else the default);
// a node that never ran it has none, and nothing is loaded to find that
// out.
func removeEBPFLeftovers(ctx context.Context, cfg *config.Config) error {
	logger := klog.FromContext(ctx)
	pinDir := ebpf.DefaultPinDir
	if cfg != nil && cfg.BPFPinDir != "" {
		pinDir = cfg.BPFPinDir
	}
	tcDir := tcPinDir(pinDir)
	switch present, err := ebpfLeftoversPresent(pinDir); {
	case err != nil:
		logger.Error(err, "Cannot tell whether ebpf mode left anything; cleaning up")
	case !present:
		logger.V(2).Info("No ebpf mode leftovers")
		return nil
	default:
		logger.Info("Removing ebpf mode's leftovers", "pinDir", pinDir)
	}
	// The socket hooks go at once: a connection they translated is a
	// socket connected to the endpoint itself, which outlives them, while
	// hooks left attached would go on translating with maps nobody
	// writes. The tc programs are drained first (drainTC); a drain cut
	// short leaves them for the next start. The pin directory goes when
	// empty, after the tc programs.
	hooks := ebpf.RemoveLeftovers(pinDir)
	if err := drainTC(ctx, tcDir); err != nil {
		return errors.Join(hooks, err)
	}
	return errors.Join(hooks, nodeport.Remove(tcDir), ebpf.RemoveLeftovers(pinDir))
}

// ebpfLeftoversPresent says whether ebpf mode left pins in pinDir: the
// socket hooks', or the tc programs' alone (a drain cut short).
func ebpfLeftoversPresent(pinDir string) (bool, error) {
	present, err := ebpf.LeftoversPresent(pinDir)
	if err != nil || present {
		return present, err
	}
	_, err = os.Stat(tcPinDir(pinDir))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// drainTC lets the node ports' new connections go to the rules that serve
// them now and waits for the connections the tc programs pinned in dir
// translated, before they are removed: those have no state in the kernel's
// conntrack, and would be reset (nodeport.Drain). A connection still open
// when the wait ends is reset; the start goes on either way.
func drainTC(ctx context.Context, dir string) error {
	logger := klog.FromContext(ctx)
	held, err := nodeport.Drain(ctx, dir, nodeport.DefaultDrainTimes, func(flows int) {
		logger.Info("Waiting for the connections the tc programs translated before removing them",
			"flows", flows, "atMost", nodeport.DefaultDrainTimes.Idle)
	})
	switch {
	case err != nil:
		return fmt.Errorf("draining the tc programs: %w", err)
	case held > 0:
		logger.Info("Removing the tc programs with connections still open: they will be reset", "flows", held)
	}
	return nil
}

// openTC is the tc programs' Proxier for ifaces, nil for none. A start
// without interfaces takes off them the programs an earlier start attached:
// their links are pinned and would otherwise go on translating with maps
// nobody writes.
func openTC(pinDir string, ifaces []string, acceleration string) (*nodeport.Proxier, error) {
	if len(ifaces) == 0 {
		if err := nodeport.Remove(tcPinDir(pinDir)); err != nil {
			return nil, fmt.Errorf("ebpf: removing the tc programs of an earlier start: %w", err)
		}
		return nil, nil
	}
	accel, err := nodeport.ParseAcceleration(acceleration)
	if err != nil {
		return nil, err
	}
	return nodeport.New(nodeport.Options{PinDir: tcPinDir(pinDir), Interfaces: ifaces, Acceleration: accel})
}

// tcPinDir is where the experimental tc programs pin, beside the socket
// hooks' family directories: LeftoversPresent finds those, and any node
// that ran the tc programs ran the hooks too.
func tcPinDir(pinDir string) string { return filepath.Join(pinDir, "tc") }

// hooksAndRules is one family of ebpf mode: the socket hooks and the
// nftables rules, given every sync the same State. A failure of either is
// the sync's failure (the syncer then recovers both); both are tried, so
// that one half's trouble does not leave the other stale.
type hooksAndRules struct {
	family proxy.IPFamily
	hooks  *ebpf.Proxier
	rules  syncer.Proxier
	held   syncer.PortHolder
	// prep is the nftables half's read-back ahead of the first sync.
	prep syncer.Preparer
	// served is when the last Sync's hooks half ended (ServedAt).
	served time.Time
	// tc, when --bpf-tc-interfaces is set (shared by both families),
	// translates packets from outside the node before netfilter sees them: a packet it translated
	// is addressed to an endpoint (or, masqueraded, redirected out of the
	// node), so the nftables rules of its frontend never match it, and
	// they stay for what tc does not serve (nodeport.Served).
	tc *nodeport.Proxier
	// expected tells the size the first State is expected to have
	// (ExpectSize).
	expected func(context.Context) (proxy.ExpectedSize, bool)
}

// HeldPorts is the nftables half's answer. After a restart whose first
// sync the kernel rejects, the search for the offending ports starts by
// programming the held ports in both halves: a port the rules hold as the
// State wants it is then served by the hooks too (their maps are written
// for it, or already hold it) and stays served while the search tries the
// others. Without an answer the search would start from no port at all,
// and both halves would drop every Service until it ends.
func (b *hooksAndRules) HeldPorts(ctx context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	if b.held == nil {
		return nil, nil
	}
	return b.held.HeldPorts(ctx, st)
}

// ReadBack is syncer.Preparer: both halves prepare their first sync at
// once, the hooks loading and attaching their programs and reading their
// maps back (ebpf.Proxier.Prepare), the nftables half reading its tables
// back. A failure of either makes the first sync a recovery sync, which
// does it again.
func (b *hooksAndRules) ReadBack(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		err := b.hooks.Prepare(ctx)
		// The hooks asked for the same size when they created maps.
		b.expectTC(ctx)
		done <- err
	}()
	var err error
	if b.prep != nil {
		err = b.prep.ReadBack(ctx)
	}
	return errors.Join(<-done, err)
}

// ExpectSize is syncer.Sizer: the hooks and the tc programs create their
// maps at the expected size; the nftables half has nothing sized.
func (b *hooksAndRules) ExpectSize(expected func(context.Context) (proxy.ExpectedSize, bool)) {
	b.hooks.ExpectSize(expected)
	b.expected = expected
}

// expectTC hands the tc programs the family's expected size when they
// will create their maps: the family that syncs first creates both
// families' (nodeport.Proxier.ExpectSize).
func (b *hooksAndRules) expectTC(ctx context.Context) {
	if b.tc == nil || b.expected == nil || !b.tc.CreatesMaps() {
		return
	}
	if size, ok := b.expected(ctx); ok {
		b.tc.ExpectSize(b.family, size)
	}
}

func (b *hooksAndRules) Init(ctx context.Context) error {
	return errors.Join(b.hooks.Init(ctx), b.rules.Init(ctx))
}

func (b *hooksAndRules) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	var tc error
	if b.tc != nil {
		tc = b.tc.Sync(ctx, st, mode)
	}
	var err error
	b.served, err = syncBoth(ctx, st, mode, b.hooks, b.rules)
	return errors.Join(tc, err)
}

// ServedAt is when the last Sync's hooks half ended, zero when it failed:
// from then on a connect from the cgroup met the State's maps, while the
// nftables half may still have been programming (syncer.EarlyServer).
func (b *hooksAndRules) ServedAt() time.Time { return b.served }

// syncBoth syncs both halves at once and joins their errors; it returns
// when the hooks half ended, zero when it failed. They share only the
// State, which neither changes, and neither needs the other's result: a
// translated connection never meets a Service rule, and the rules serve
// what the hooks cannot see. So on a node with more than one CPU a sync
// takes the longer half, not the sum of both.
func syncBoth(ctx context.Context, st *desired.State, mode proxy.SyncMode, hooks, rules syncer.Proxier) (time.Time, error) {
	type result struct {
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		err := hooks.Sync(ctx, st, mode)
		r := result{err: err}
		if err == nil {
			r.at = time.Now()
		}
		done <- r
	}()
	rulesErr := rules.Sync(ctx, st, mode)
	r := <-done
	return r.at, errors.Join(r.err, rulesErr)
}

// CanaryMissing: a pin gone (the hooks' or the tc programs') or the
// nftables canary gone.
func (b *hooksAndRules) CanaryMissing(ctx context.Context) (bool, error) {
	if b.tc != nil && b.tc.CanaryMissing() {
		return true, nil
	}
	missing, err := b.hooks.CanaryMissing(ctx)
	if err != nil || missing {
		return missing, err
	}
	return b.rules.CanaryMissing(ctx)
}

func (b *hooksAndRules) Cleanup(ctx context.Context) error {
	var tc error
	if b.tc != nil {
		tc = b.tc.Cleanup()
	}
	return errors.Join(tc, b.hooks.Cleanup(ctx), b.rules.Cleanup(ctx))
}
