// Package ipvs is the IPVS backend: it renders a desired.State into IPVS
// virtual servers, addresses on the dummy link kube-ipvs0, ipsets and the
// few iptables rules IPVS mode needs, and applies only the difference from
// what it committed last. See README.md.
package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Options configure a Proxier. Zero values take upstream's defaults. What
// the State decides (schedulers, node-port addresses, the masquerade mark)
// is not an option.
type Options struct {
	// ExcludeCIDRs hold virtual servers this Proxier never deletes.
	ExcludeCIDRs []netip.Prefix
	// StrictARP makes Init set arp_ignore=1 and arp_announce=2.
	StrictARP bool
	// TCPTimeout, TCPFinTimeout and UDPTimeout set IPVS connection
	// timeouts in Init; zero leaves the kernel's value.
	TCPTimeout, TCPFinTimeout, UDPTimeout time.Duration
	// GracePeriod bounds how long a removed real server with open
	// connections is kept at weight 0; 0 means DefaultGracePeriod.
	GracePeriod time.Duration
	// ReapInterval is how often the reaper looks at terminating real
	// servers; 0 means DefaultReapInterval, negative disables the
	// background reaper (tests call Reap).
	ReapInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Flavour selects iptables-nft or iptables-legacy for New; "" detects
	// (callers making both families' proxiers detect once and pass it).
	Flavour kiptables.Flavour
}

// Defaults for Options.
const (
	DefaultGracePeriod  = 15 * time.Minute
	DefaultReapInterval = time.Minute
)

// Iptables is what the backend needs of an iptables client bound to its
// family (kiptables.Client and kiptables.Fake satisfy it).
type Iptables interface {
	Restore(ctx context.Context, data ...[]byte) error
	ChainExists(ctx context.Context, table kiptables.Table, chain string) (bool, error)
	EnsureRuleAtFront(ctx context.Context, table kiptables.Table, chain string, rule ...string) error
	DeleteRule(ctx context.Context, table kiptables.Table, chain string, rule ...string) error
}

// Clients are the kernel interfaces a Proxier programs through.
type Clients struct {
	IPVS     kipvs.Interface
	IPSet    kipset.Interface
	Link     klink.Interface
	Iptables Iptables
	Sysctl   Sysctl
	// KernelVersion returns the running kernel's release ("5.10.0-28");
	// nil means uname.
	KernelVersion func() (string, error)
}

// Proxier programs one IP family in IPVS mode. Sync is called from one
// goroutine; the reaper runs beside it and shares the state under mu.
type Proxier struct {
	family proxy.IPFamily
	opts   Options
	c      Clients

	mu          sync.Mutex
	store       *store
	terminating map[rsKey]time.Time // since when a real server is at weight 0
	rulesText   []byte              // iptables input last applied
	setsReady   bool
	capacity    map[string]uint32 // of the hash sets, as listed or resized (capacity.go)

	reaperOnce sync.Once
	stopReaper context.CancelFunc
}

// New returns a Proxier for family over the real kernel clients of the
// caller's network namespace.
func New(family proxy.IPFamily, opts Options) (*Proxier, error) {
	ipvsClient, err := kipvs.New("")
	if err != nil {
		return nil, err
	}
	setClient, err := kipset.New("")
	if err != nil {
		return nil, err
	}
	linkClient, err := klink.New("")
	if err != nil {
		return nil, err
	}
	flavour := opts.Flavour
	if flavour == "" {
		flavour = kiptables.DetectFlavour(context.Background())
	}
	ipt, err := kiptables.New(family, flavour)
	if err != nil {
		return nil, fmt.Errorf("iptables %s: %w", family, err)
	}
	return NewWithClients(family, opts, Clients{
		IPVS: ipvsClient, IPSet: setClient, Link: linkClient, Iptables: ipt, Sysctl: ProcSysctl{},
	}), nil
}

// NewWithClients returns a Proxier over the given clients (tests pass fakes).
func NewWithClients(family proxy.IPFamily, opts Options, c Clients) *Proxier {
	if opts.GracePeriod <= 0 {
		opts.GracePeriod = DefaultGracePeriod
	}
	if opts.ReapInterval == 0 {
		opts.ReapInterval = DefaultReapInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Proxier{family: family, opts: opts, c: c, store: newStore(family),
		terminating: map[rsKey]time.Time{}, capacity: map[string]uint32{}}
}

// Sync is part of syncer.Proxier. A full sync also rewrites the iptables
// rules, repairing them; a recovery sync first re-adopts the kernel's
// virtual servers and ipsets.
func (p *Proxier) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	if st.Family != p.family {
		return fmt.Errorf("ipvs %s proxier got a %s state", p.family, st.Family)
	}
	p.startReaper()
	p.mu.Lock()
	defer p.mu.Unlock()
	plan, err := p.store.syncs.Begin(mode, fmt.Sprintf("ipvs %s", p.family))
	if err != nil {
		return err
	}
	if err := p.sync(ctx, st, plan); err != nil {
		// Re-adopt the kernel's objects: whatever failed may have been
		// changed behind our back (the syncer's next sync is a recovery).
		p.store.syncs.Failed()
		return fmt.Errorf("syncing ipvs %s: %w", p.family, err)
	}
	return nil
}

// sync programs st. The iptables rules go last: a node leaving iptables
// mode has that mode's rules in the chains IPVS mode rewrites
// (KUBE-SERVICES, KUBE-POSTROUTING, …), and they serve its Services until
// they are replaced; written before the virtual servers and the addresses,
// they left new connections without either for the rest of the sync.
func (p *Proxier) sync(ctx context.Context, st *desired.State, plan reconcile.Plan) error {
	if err := p.ensureLinkAndSets(); err != nil {
		return err
	}
	if plan.ReadBack {
		if err := p.readBack(); err != nil {
			return err
		}
		p.store.syncs.ReadDone()
	}
	parts, err := render(newRenderConfig(st), st, plan.Full)
	if err != nil {
		return err
	}
	if plan.Full {
		p.store.resetClaims()
	}
	for name, pt := range parts {
		p.store.replace(name, pt)
	}
	errs := []error{p.apply(), p.ensureRules(ctx, st, plan.Full)}
	if plan.Full {
		errs = append(errs, p.shrinkSets())
	}
	return errors.Join(errs...)
}

// render renders every service port (full) or the changed ones, a removed
// port as nil. Nothing reaches the store when a route cannot be rendered.
func render(cfg *renderConfig, st *desired.State, full bool) (map[proxy.ServicePortName]*part, error) {
	parts := make(map[proxy.ServicePortName]*part)
	if full {
		for name, sp := range st.Services.All() {
			parts[name] = renderService(cfg, sp)
		}
	} else {
		for name := range st.Changed {
			var pt *part
			if sp := st.Service(name); sp != nil {
				pt = renderService(cfg, sp)
			}
			parts[name] = pt
		}
	}
	return parts, cfg.err
}

// ensureLinkAndSets creates the dummy link and the ipsets (the sets must
// exist before the rules that match on them).
func (p *Proxier) ensureLinkAndSets() error {
	if err := p.c.Link.EnsureDummy(DummyLink); err != nil {
		return err
	}
	if !p.setsReady {
		if err := p.ensureSets(); err != nil {
			return err
		}
		p.setsReady = true
	}
	return nil
}

// ensureRules (re)writes the iptables rules in a full sync or when the
// masquerade policy changed.
func (p *Proxier) ensureRules(ctx context.Context, st *desired.State, full bool) error {
	text := renderIptables(p.family, st.Masquerade)
	if full || !slices.Equal(text, p.rulesText) {
		if err := p.c.Iptables.Restore(ctx, text); err != nil {
			p.rulesText = nil
			return fmt.Errorf("restoring iptables rules: %w", err)
		}
		p.rulesText = text
		for _, j := range jumps {
			if err := p.c.Iptables.EnsureRuleAtFront(ctx, j.table, j.chain, j.rule...); err != nil {
				p.rulesText = nil
				return fmt.Errorf("ensuring jump from %s %s: %w", j.table, j.chain, err)
			}
		}
	}
	return nil
}

// ensureSets creates the sets that do not exist yet, with upstream's
// capacity (capacity.go). It lists first so that a restart adopts the sets
// it finds, whatever their capacity, without a single write, failed or
// not; ErrExists still counts as success for a set created meanwhile.
func (p *Proxier) ensureSets() error {
	listed, err := p.c.IPSet.ListSets()
	if err != nil {
		return fmt.Errorf("listing ipsets: %w", err)
	}
	existing := map[string]bool{}
	for _, s := range listed {
		existing[s.Name] = true
		if s.Type != kipset.BitmapPort {
			p.capacity[s.Name] = s.MaxElements
		}
	}
	var errs []error
	family := kipset.Inet
	if p.family == proxy.IPv6 {
		family = kipset.Inet6
	}
	for _, s := range setSpecs {
		name := setName(p.family, s.name)
		if existing[name] {
			continue
		}
		err := p.c.IPSet.CreateSet(kipset.Set{Name: name, Type: s.typ, Family: family, Comment: s.comment})
		if err != nil && !errors.Is(err, kipset.ErrExists) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
