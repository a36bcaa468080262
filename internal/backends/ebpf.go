package backends

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/localapi"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ebpfSyncFailures counts ebpf mode's failed syncs (either half's).
var ebpfSyncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "svcproxy_ebpf_sync_failures_total",
	Help: "Cumulative syncs that failed in ebpf mode, in the socket hooks' maps, the tc programs' maps or the nftables rules.",
}, []string{metrics.LabelIPFamily})

// ebpfBackend is ebpf mode's row. The socket hooks translate what a
// process in the cgroup connects to; they never see packets from other
// nodes, nor processes outside the cgroup. Those the nftables rules serve
// as in nftables mode, rendered from the same State, except in a family
// the tc programs serve (--bpf-tc-interfaces, tcServes): there the tc
// programs translate packets from outside the node and the family has no
// nftables rules. A connection the hooks translated already goes to the
// endpoint and matches no Service rule.
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
	Decide:          decideEBPF,
	RemoveLeftovers: removeEBPFLeftovers,
	// The tc programs see the node ports' packets before the rules do.
	StopNewConnections: stopTCNewConnections,
	// Its packet path is nftables mode's tables, kept; a family the tc
	// programs serve removes its own once they have synced (openTCHalf).
	KeepsLeftoversOf: []proxy.Mode{proxy.ModeNFTables},
	Objects:          ebpfObjects,
	SyncFailures:     ebpfSyncFailures,
	// The connect-time path's own time and latency (syncer.EarlyServer).
	Metrics: []prometheus.Collector{ebpfSyncFailures, proxymetrics.EarlyServedLastTimestamp, proxymetrics.EarlyProgrammingLatency},
}

// decideEBPF is nftables mode's decisions (the nftables half renders the
// same State) and direct server return, which only the tc programs do:
// with --bpf-dsr, ports that ask for it tunnel to peers (config.ValidateDSR
// refused --bpf-dsr without --bpf-tc-interfaces).
func decideEBPF(cfg *config.Config, o *desired.Options) {
	nftablesBackend.Decide(cfg, o)
	o.DSR = cfg.BPFDSR && len(cfg.BPFTCInterfaces) > 0
}

// stateDir holds what svcproxy mounts for itself (beside the local API's
// socket).
var stateDir = filepath.Dir(localapi.DefaultPath)

// tcServes says whether the tc programs, when --bpf-tc-interfaces turns
// them on, serve family's traffic from outside the node: such a family
// runs no nftables half (docs/design/0009-ebpf-without-nftables.md). The
// one place that says which families the programs serve: both, since
// they serve IPv6 as IPv4 (docs/design/0011-tc-both-families.md).
func tcServes(family proxy.IPFamily) bool { return family == proxy.IPv4 || family == proxy.IPv6 }

// rulesFamilies are the families of env that run an nftables half.
func rulesFamilies(env Env) []proxy.IPFamily {
	tcOn := len(env.Config.BPFTCInterfaces) > 0
	var out []proxy.IPFamily
	for _, f := range env.Families {
		if !tcOn || !tcServes(f) {
			out = append(out, f)
		}
	}
	return out
}

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
	rulesEnv := env
	rulesEnv.Families = rulesFamilies(env)
	inst, err := openNFTables(ctx, rulesEnv)
	if err != nil {
		return nil, err
	}
	hooks := map[proxy.IPFamily]*ebpf.Proxier{}
	inst.StaleFlows = map[proxy.IPFamily][]StaleFlows{}
	// One tc Proxier serves both families: one set of programs on the
	// interfaces, each family's maps synced from its own State.
	tc, err := openTC(inst, pinDir, env)
	if err != nil {
		inst.Close()
		return nil, err
	}
	retireTC := tcRetirementOf(inst, tc, pinDir, env.Families)
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
		both := &hooksAndRules{family: f, hooks: p}
		// Ahead of the first sync, while the lists arrive, the nftables
		// half reads its tables back and says whether they held rules,
		// and the hooks load, attach and read their maps back
		// (ReadBack), creating new maps at the size the initial lists'
		// first pages promise (ExpectSize). Which ports the kernel holds is
		// the nftables half's answer (HeldPorts).
		nft, withRules := inst.Proxiers[f]
		if withRules {
			both.rules, both.held, both.prep = nft.Proxier, nft.PortHolder, nft.Preparer
		}
		tcHalf(inst, both, tc, retireTC)
		inst.Proxiers[f] = syncer.Backend{Proxier: both, Preparer: both, RulesHolder: nft.RulesHolder, PortHolder: both,
			EarlyServer: both, Sizer: both}
	}
	klog.FromContext(ctx).Info("ebpf mode: socket hooks", "cgroup", cgroup, "pinDir", pinDir,
		"tcInterfaces", env.Config.BPFTCInterfaces, "acceleration", env.Config.BPFAcceleration,
		"nftablesFamilies", rulesEnv.Families)
	warnAcceleratedVeths(ctx, env.Config)
	inst.Metrics = append(inst.Metrics, metrics.WithFamilies(newEBPFCollector(hooks)))
	return inst, nil
}

// openTC is the tc programs' Proxier, which serves both families, nil
// when --bpf-tc-interfaces is empty.
func openTC(inst *Instance, pinDir string, env Env) (*nodeport.Proxier, error) {
	if len(env.Config.BPFTCInterfaces) == 0 {
		return nil, nil
	}
	accel, err := nodeport.ParseAcceleration(env.Config.BPFAcceleration)
	if err != nil {
		return nil, err
	}
	tc, err := nodeport.New(nodeport.Options{PinDir: tcPinDir(pinDir), Interfaces: env.Config.BPFTCInterfaces, Acceleration: accel})
	if err != nil {
		return nil, err
	}
	inst.OnClose(tc.Close)
	inst.Metrics = append(inst.Metrics, metrics.WithFamilies(tcDropsCollector{tc, env.Families}))
	return tc, nil
}

// tcHalf gives both what the tc programs (tc, nil when off) mean for its
// family. With them on, they translate the family's packets from outside
// the node; in a family they serve in place of an nftables half
// (tcServes), that family's nftables rules (a start without them, or
// nftables mode, left them) go once they have synced, all but their empty
// nat chains and a rule that keeps conntrack on (nftables.KeepNATHooks:
// the connections the rules translated keep their translation), and those
// go too once no such connection is left (keptHooksRetirement). With them
// off, the programs an earlier start attached are drained and go once the
// nftables halves of every family have synced in their place (retireTC):
// their links are pinned and would otherwise go on translating with maps
// nobody writes. Either way the old path serves until the new one is
// programmed (make before break), and the connections it carries outlive
// it.
func tcHalf(inst *Instance, both *hooksAndRules, tc *nodeport.Proxier, retireTC *tcRetirement) {
	family := both.family
	if tc == nil {
		if retireTC != nil && tcServes(family) {
			both.retire = retirement{what: "the tc programs of an earlier start", remove: func(ctx context.Context) error {
				return retireTC.synced(ctx, family)
			}}
		}
		return
	}
	both.tc = tc
	inst.StaleFlows[family] = append(inst.StaleFlows[family], StaleFlows{Table: tc.Flows(), Name: "ebpf tc flows"})
	inst.Metrics = append(inst.Metrics, metrics.WithFamilies(newTCFlowsCollector(tc.Flows(), family)))
	if tcServes(family) {
		both.retire = retirement{what: "the nftables rules", remove: func(ctx context.Context) error {
			return nftables.KeepNATHooks(ctx, family)
		}, then: keptHooksRetirement(family)}
	}
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
	pinDir := pinDirOf(cfg)
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
	// The tc programs take no new connection first: the leftovers removal
	// made them so before any mode's removal (stopTCNewConnections), and
	// beginning again changes nothing, for a caller that removes this
	// mode's leftovers alone. The socket hooks go at once: a connection
	// they translated is a socket connected to the endpoint itself, which
	// outlives them, while hooks left attached would go on translating
	// with maps nobody writes. The tc programs go once the connections
	// they hold are done (waitTC); a wait cut short leaves them for the
	// next start. The pin directory goes when empty, after the tc
	// programs.
	begun := beginTCDrain(tcDir)
	hooks := ebpf.RemoveLeftovers(pinDir)
	if begun != nil {
		return errors.Join(hooks, begun)
	}
	if err := waitTC(ctx, tcDir, kconntrack.New); err != nil {
		return errors.Join(hooks, err)
	}
	if err := errors.Join(hooks, nodeport.Remove(tcDir), ebpf.RemoveLeftovers(pinDir)); err != nil {
		return err
	}
	// The line an operator rolling back to kube-proxy waits for before
	// swapping the image: kube-proxy leaves whatever is still pinned
	// attached (docs/user/migration.md).
	logger.Info("Removed ebpf mode's leftovers: its socket hooks and tc programs are unpinned, which detaches them", "pinDir", pinDir)
	return nil
}

// stopTCNewConnections makes the tc programs ebpf mode left take no new
// connection (beginTCDrain) and returns, without waiting for the ones they
// hold: those are removeEBPFLeftovers' to wait for. The programs see
// packets before netfilter, so until then they would take the new mode's
// node ports' connections, and hold each one they took until it ends. A
// node without them has nothing to stop, and nothing is loaded to find
// that out.
func stopTCNewConnections(ctx context.Context, cfg *config.Config) error {
	dir := tcPinDir(pinDirOf(cfg))
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	klog.FromContext(ctx).Info("The tc programs ebpf mode left take no new connections from now on; the rules serve them", "pinDir", dir)
	return beginTCDrain(dir)
}

// pinDirOf is ebpf mode's pin directory under cfg (nil: the defaults).
func pinDirOf(cfg *config.Config) string {
	if cfg != nil && cfg.BPFPinDir != "" {
		return cfg.BPFPinDir
	}
	return ebpf.DefaultPinDir
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

// beginTCDrain lets the node ports' new connections go to the rules that
// serve them now, past the tc programs pinned in dir, which keep
// translating the connections they hold (nodeport.BeginDrain).
func beginTCDrain(dir string) error {
	if err := nodeport.BeginDrain(dir, tcDrainTimes); err != nil {
		return fmt.Errorf("draining the tc programs: %w", err)
	}
	return nil
}

// waitTC waits, once their drain has begun, for the connections the tc
// programs pinned in dir translated, before they are removed: those have
// no state in the kernel's conntrack (nodeport.WaitDrained). The ones
// still open when the wait ends, idle ones included, are handed to the
// kernel's conntrack that conntrack opens (handOverTC); the start goes
// on either way.
func waitTC(ctx context.Context, dir string, conntrack func() (*kconntrack.Client, error)) error {
	logger := klog.FromContext(ctx)
	_, err := nodeport.WaitDrained(ctx, dir, tcDrainTimes, func(flows int) {
		logger.Info("Waiting for the connections the tc programs translated before removing them; those still open then go to the kernel's conntrack",
			"flows", flows, "atMost", tcDrainTimes.Idle)
	})
	if err != nil {
		return fmt.Errorf("draining the tc programs: %w", err)
	}
	handOverTC(ctx, dir, conntrack)
	return nil
}

// tcRetirement takes off the interfaces, in the background, the tc
// programs an earlier start with --bpf-tc-interfaces left pinned in dir:
// their links would otherwise go on translating with maps nobody writes.
// It drains them first, as a switch to another mode does (beginTCDrain,
// then waitTC): their new connections go to the nftables half's rules,
// which serve the same Services by then, and they are removed once the
// connections they translated are done. The programs serve every family:
// the drain begins once every family's nftables half has synced (synced),
// so that none is left with neither path meanwhile. stop ends a drain
// still waiting, which leaves them for the next start.
type tcRetirement struct {
	dir string
	mu  sync.Mutex
	// unsynced are the families whose nftables half has not synced yet.
	unsynced map[proxy.IPFamily]bool
	cancel   context.CancelFunc
	done     chan struct{}
	// conntrack opens the kernel's conntrack of the network namespace the
	// start runs in, for the handover: the drain's goroutine may run on
	// any thread.
	conntrack func() (*kconntrack.Client, error)
}

// tcRetirementOf is the removal of the tc programs an earlier start left,
// for a start without them (tc nil; nil otherwise): it waits for the
// first successful sync of each of the families the programs serve.
func tcRetirementOf(inst *Instance, tc *nodeport.Proxier, pinDir string, families []proxy.IPFamily) *tcRetirement {
	if tc != nil {
		return nil
	}
	r := &tcRetirement{dir: tcPinDir(pinDir), unsynced: map[proxy.IPFamily]bool{}}
	for _, f := range families {
		if tcServes(f) {
			r.unsynced[f] = true
		}
	}
	if len(r.unsynced) == 0 {
		return nil
	}
	r.conntrack = conntrackHere(inst)
	inst.OnClose(r.stop)
	return r
}

// synced says that family's nftables half has synced: the last family to
// do so begins the drain (start).
func (r *tcRetirement) synced(ctx context.Context, family proxy.IPFamily) error {
	r.mu.Lock()
	delete(r.unsynced, family)
	waiting := len(r.unsynced)
	r.mu.Unlock()
	if waiting > 0 {
		klog.FromContext(ctx).V(2).Info("The tc programs of an earlier start go once every family's nftables rules have synced", "ipFamily", family, "familiesStillToSync", waiting)
		return nil
	}
	return r.start(ctx)
}

// start begins the drain, once, and returns when the programs take no new
// connection (they go to the rules that just synced) and only the wait
// for the ones they hold goes on, in the background; a drain that could
// not begin is tried again after the next sync (retireOld). ctx gives the
// logger, not the wait's lifetime (a sync's context ends with the sync).
func (r *tcRetirement) start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return nil
	}
	if _, err := os.Stat(r.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	logger := klog.FromContext(ctx)
	logger.Info("Removing the tc programs of an earlier start: --bpf-tc-interfaces is not set", "pinDir", r.dir)
	if err := beginTCDrain(r.dir); err != nil {
		return err
	}
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	r.done = done
	go func() {
		defer close(done)
		err := waitTC(ctx, r.dir, r.conntrack)
		if err == nil {
			err = nodeport.Remove(r.dir)
		}
		switch {
		case err == nil:
			logger.Info("Removed the tc programs of an earlier start", "pinDir", r.dir)
		case ctx.Err() != nil:
			logger.Info("Stopped before the tc programs of an earlier start were drained; the next start removes them", "pinDir", r.dir)
		default:
			logger.Error(err, "Removing the tc programs of an earlier start failed; the next start tries again", "pinDir", r.dir)
		}
	}()
	return nil
}

// stop ends the drain, if one runs, and waits for it.
func (r *tcRetirement) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		r.cancel()
		<-r.done
	}
}

// tcPinDir is where the experimental tc programs pin, beside the socket
// hooks' family directories: LeftoversPresent finds those, and any node
// that ran the tc programs ran the hooks too.
func tcPinDir(pinDir string) string { return filepath.Join(pinDir, "tc") }
