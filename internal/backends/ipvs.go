package backends

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ipvsBackend is IPVS mode's row.
var ipvsBackend = Backend{
	Mode:     proxy.ModeIPVS,
	Families: hostFamilies,
	Check:    checkIPVS,
	Open:     openIPVS,
	Decide: func(cfg *config.Config, o *desired.Options) {
		// IPVS binds a virtual server to every node-port address and has
		// a scheduler per port: Compute resolves both once, the scheduler
		// through the backend's own PortSettings from ipvs.scheduler
		// (round robin when unset; checkIPVS refuses a configured name the
		// kernel does not ship) and the Service's annotation.
		o.BindNodePorts = true
		o.PortSettings = ipvs.NewScheduling(cmp.Or(cfg.IPVS.Scheduler, kipvs.RoundRobin))
	},
	RefusedSetting: func(value string) Warning {
		return Warning{Reason: "InvalidIPVSScheduler", Message: fmt.Sprintf(
			"annotation %s=%q names no IPVS scheduler (one of %v); the node's default is used",
			ipvs.SchedulerAnnotation, value, kipvs.Schedulers)}
	},
	RemoveLeftovers:  anyConfig(removeIPVSLeftovers),
	KeepsLeftoversOf: []proxy.Mode{proxy.ModeIPTables},
	Links:            []string{ipvs.DummyLink},
	Objects:          ipvsObjects,
	// Upstream counts IPVS mode's failed syncs as iptables mode's.
	SyncFailures: proxymetrics.IPTablesRestoreFailuresTotal,
}

// checkIPVS refuses a scheduler the kernel does not ship, and warns that
// the mode is deprecated, as upstream.
func checkIPVS(cfg *config.Config) (*Warning, error) {
	if s := cfg.IPVS.Scheduler; s != "" && !slices.Contains(kipvs.Schedulers, s) {
		return nil, fmt.Errorf("can't use the IPVS proxier: scheduler %q is not one of %v", s, kipvs.Schedulers)
	}
	return &Warning{Reason: "IPVSDeprecation", Message: config.IPVSDeprecationMessage}, nil
}

func openIPVS(ctx context.Context, env Env) (*Instance, error) {
	cfg := env.Config
	opts := ipvs.Options{
		ExcludeCIDRs:  cfg.IPVS.ExcludeCIDRs,
		StrictARP:     cfg.IPVS.StrictARP,
		TCPTimeout:    cfg.IPVS.TCPTimeout,
		TCPFinTimeout: cfg.IPVS.TCPFinTimeout,
		UDPTimeout:    cfg.IPVS.UDPTimeout,
		Flavour:       kiptables.DetectFlavour(ctx),
	}
	inst, err := PerFamily(env,
		func(f proxy.IPFamily) (*ipvs.Proxier, error) { return ipvs.New(f, opts) },
		func(p *ipvs.Proxier) syncer.Backend { return syncer.Backend{Proxier: p, PortHolder: p} },
		(*ipvs.Proxier).Close)
	if err != nil {
		return nil, err
	}
	inst.IPTablesFlavour = opts.Flavour
	return inst, nil
}

// removeIPVSLeftovers removes the virtual servers IPVS mode made (never a
// node's other IPVS users', see ipvs.Proxier.Cleanup), kube-ipvs0 and the
// ipsets. A kernel without IPVS has nothing to clean. What is there is
// read first: creating the clients runs modprobe and the iptables tools.
func removeIPVSLeftovers(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	switch present, what, err := ipvs.LeftoversPresent(); {
	case err != nil:
		logger.Error(err, "Cannot tell whether IPVS mode left anything; cleaning up")
	case !present:
		logger.V(2).Info("No IPVS mode leftovers")
		return nil
	default:
		logger.Info("Removing IPVS mode's leftovers", "found", what)
	}
	var errs []error
	opts := ipvs.Options{ReapInterval: -1, Flavour: kiptables.DetectFlavour(ctx)}
	for _, family := range proxy.Families {
		p, err := ipvs.New(family, opts)
		if err != nil {
			logger.V(2).Info("IPVS is not available; nothing to clean", "family", family, "err", err)
			continue
		}
		if err := p.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", family, err))
		}
		p.Close()
	}
	return errors.Join(errs...)
}
