// Package backends is the table of proxy modes: one row per backend, which
// names everything outside the backend's own package that svcproxy needs
// to know about it. The app, the leftovers cleanup, explain, the metrics
// registration and the syncer read a mode's row; nothing else switches
// over modes. Adding a backend is its package plus its row (README.md).
package backends

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Backend is one proxy mode's row. Mode, Families, Open, RemoveLeftovers
// and Objects are required; the rest may be left zero.
type Backend struct {
	Mode proxy.Mode
	// Families lists the IP families to run a Proxier for on this host.
	Families func() []proxy.IPFamily
	// Check runs at start, once the Node is known and before anything is
	// programmed: an error refuses the configuration, a Warning is logged
	// and posted as an Event about the node.
	Check func(cfg *config.Config) (*Warning, error)
	// Open makes the Proxiers of env.Families (not yet initialized).
	Open func(ctx context.Context, env Env) (*Instance, error)
	// Decide sets, in o, what the mode needs desired to decide for it
	// (node ports on loopback, addresses to bind, its own per-port
	// settings, …); the fields every mode shares are already set.
	Decide func(cfg *config.Config, o *desired.Options)
	// RefusedSetting words the Warning Event about a Service whose
	// extension annotation the mode's own per-port decision refused
	// (desired.PortSetting.Refused); needed when Decide sets
	// PortSettings.
	RefusedSetting func(value string) Warning
	// RemoveLeftovers removes what the mode left in the kernel, reading
	// the kernel first so that a node with nothing left starts no tool:
	// other modes run it at start, --cleanup runs every row's. cfg is the
	// running configuration (nil: the defaults), for a mode whose objects
	// live where an option of its own says (ebpf mode's --bpf-pin-dir).
	RemoveLeftovers func(ctx context.Context, cfg *config.Config) error
	// StopNewConnections, when not nil, makes what the mode left take no
	// new connection, and leaves the rest, the connections it carries
	// included, to RemoveLeftovers. The leftovers removal runs it for
	// every mode it removes before any RemoveLeftovers: for objects that
	// see packets before netfilter (ebpf mode's tc programs), which the
	// running mode's rules cannot take new connections from, and which
	// would otherwise take them until the removal reached their mode and
	// then hold them. RemoveLeftovers alone still removes everything.
	StopNewConnections func(ctx context.Context, cfg *config.Config) error
	// KeepsLeftoversOf lists the modes whose leftovers this mode leaves
	// in place at start.
	KeepsLeftoversOf []proxy.Mode
	// Links names the network interfaces the mode creates whose
	// addresses are not the node's (IPVS's dummy link holds every
	// service IP): the app leaves them out of the host's addresses in
	// every mode, as a node that ran the mode may still have them.
	Links []string
	// Objects names, for svcproxy explain, the kernel objects that
	// implement an explanation (objects.go).
	Objects ObjectsFunc
	// SyncFailures counts the mode's failed syncs by ip_family.
	SyncFailures *prometheus.CounterVec
	// Metrics are families the mode exposes that metrics.Register does
	// not know of (a mode upstream does not have), its SyncFailures
	// included.
	Metrics []prometheus.Collector
}

// ObjectsFunc lists the kernel objects that implement e in one backend,
// one line each, named as the backend names them.
type ObjectsFunc func(ctx context.Context, state *desired.State, e explain.Explanation) ([]string, error)

// Warning is a Warning Event about the node, under upstream's reason.
type Warning struct {
	Reason, Message string
}

// Env is what Open builds a backend from.
type Env struct {
	Config   *config.Config
	Families []proxy.IPFamily
	// InitOnly: only Init will be called (--init-only), so nothing that
	// only syncs or metrics read needs opening.
	InitOnly bool
}

// Instance is an opened backend.
type Instance struct {
	// Proxiers has one entry per family of Env.Families. A backend that
	// serves both families from one object lists it under both.
	Proxiers map[proxy.IPFamily]syncer.Backend
	// Metrics are options of metrics.Register that read the instance's
	// counters.
	Metrics []metrics.Option
	// IPTablesFlavour is the flavour of the iptables tools the instance
	// drives ("" if none), for svcproxy status.
	IPTablesFlavour kiptables.Flavour
	// StaleFlows are, per family, tables of connections beside
	// conntrack's that go stale as its flows do and are removed by the
	// same rule.
	StaleFlows map[proxy.IPFamily][]StaleFlows
	closers    []func()
}

// StaleFlows is a table of connections the conntrack cleanup's rule
// applies to: ebpf mode's sockets, translated at connect, and the flows of
// its tc programs' own conntrack table, which keep their endpoint as a
// DNATed flow does.
type StaleFlows struct {
	Table kconntrack.Interface
	// Name is what logs call the table. The table counts what it removes
	// in metrics of its own (the conntrack cleanup's are conntrack's).
	Name string
}

// OnClose adds f to what Close runs.
func (i *Instance) OnClose(f func()) { i.closers = append(i.closers, f) }

// Close releases what Open opened, last first.
func (i *Instance) Close() {
	for j := len(i.closers) - 1; j >= 0; j-- {
		i.closers[j]()
	}
	i.closers = nil
}

// Registry is a table of backends.
type Registry []Backend

// ErrModeNotImplemented is returned for a mode without a row, so that
// svcproxy never pretends to proxy.
var ErrModeNotImplemented = errors.New("not implemented yet")

// Lookup returns mode's row.
func (r Registry) Lookup(mode proxy.Mode) (*Backend, error) {
	for i := range r {
		if r[i].Mode == mode {
			return &r[i], nil
		}
	}
	return nil, fmt.Errorf("proxy mode %q: %w", mode, ErrModeNotImplemented)
}

// Links lists every row's Links.
func (r Registry) Links() []string {
	var out []string
	for i := range r {
		out = append(out, r[i].Links...)
	}
	return out
}

// Options are the options of desired.Compute for family under cfg: the
// fields every mode shares, then what b decides for its mode.
func (b *Backend) Options(cfg *config.Config, family proxy.IPFamily) desired.Options {
	o := desired.Options{
		Family:              family,
		MasqueradeBit:       cfg.MasqueradeBit,
		MasqueradeAll:       cfg.MasqueradeAll,
		DetectLocalMode:     string(cfg.DetectLocalMode),
		ClusterCIDRs:        cfg.ClusterCIDRs,
		BridgeInterface:     cfg.BridgeInterface,
		InterfaceNamePrefix: cfg.InterfaceNamePrefix,
		NodePortAddresses:   cfg.NodePortAddresses,
		ExternalBalancing:   cfg.ExternalBalancing,
		ExternalForwarding:  cfg.ExternalForwarding,
	}
	if b.Decide != nil {
		b.Decide(cfg, &o)
	}
	return o
}

// anyConfig is a RemoveLeftovers for a mode whose leftovers are where
// they are whatever the configuration says.
func anyConfig(remove func(context.Context) error) func(context.Context, *config.Config) error {
	return func(ctx context.Context, _ *config.Config) error { return remove(ctx) }
}

// PerFamily is an Open for a backend with one Proxier per family: newOne
// makes each, and close, if not nil, is run for each at Close.
func PerFamily[P syncer.Proxier](env Env, newOne func(proxy.IPFamily) (P, error), capabilities func(P) syncer.Backend, closeOne func(P)) (*Instance, error) {
	inst := &Instance{Proxiers: make(map[proxy.IPFamily]syncer.Backend, len(env.Families))}
	for _, f := range env.Families {
		p, err := newOne(f)
		if err != nil {
			inst.Close()
			return nil, err
		}
		if closeOne != nil {
			inst.OnClose(func() { closeOne(p) })
		}
		inst.Proxiers[f] = capabilities(p)
	}
	return inst, nil
}
