// Package iptables is the iptables backend: it renders a desired.State
// into upstream kube-proxy's chains (same names, hashes, comments and rule
// shapes) and programs them with one iptables-restore per sync, rewriting
// only the chains of service ports that changed. See README.md.
package iptables

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/knfacct"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// largeClusterEndpoints is upstream's threshold for large-cluster mode.
const largeClusterEndpoints = 1000

// Options carries what the State does not.
type Options struct {
	// ConntrackTCPBeLiberal is net.netfilter.nf_conntrack_tcp_be_liberal
	// != 0: no INVALID drop rule is needed then.
	ConntrackTCPBeLiberal bool
	// NFAcct, if set, holds the node's nfacct objects: full syncs ensure
	// them and the INVALID drop and IPv4 localhost node port rules count
	// into those that exist (the kubeproxy_iptables_*_packets_total
	// metrics). nil renders no nfacct match.
	NFAcct knfacct.Interface
	// RejectUnknownClusterIPPorts rejects traffic to a cluster IP on a port
	// no service uses, as nftables mode does. Off by default: upstream's
	// iptables mode has no such rules.
	RejectUnknownClusterIPPorts bool
	// SyncPeriod bounds how often, in large-cluster mode, iptables-save is
	// run to sweep stale chains.
	SyncPeriod time.Duration
	// EnsureRouteLocalnet sets net.ipv4.conf.all.route_localnet=1; it is
	// called once a State DNATs IPv4 localhost node ports. nil skips it.
	EnsureRouteLocalnet func() error
	// Flavour selects iptables-nft or iptables-legacy for New; "" detects.
	Flavour kiptables.Flavour
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Proxier programs one IP family. Sync and Cleanup must not run
// concurrently; CanaryMissing may run beside them.
type Proxier struct {
	family proxy.IPFamily
	ipt    kiptables.Interface
	opts   Options
	probs  probabilities

	counters counters // the nfacct objects the last full sync ensured
	cfg      *config  // config of the last successful sync
	// entries keeps each port's lines in the shared chains, which are
	// written whole and so are assembled from every port's lines.
	entries map[proxy.ServicePortName]*entry
	// unsettled are the ports whose entries and claims a partial sync
	// the tool refused before committing rendered: the next partial sync
	// renders them again from its State.
	unsettled map[proxy.ServicePortName]struct{}
	// store is the chains in the kernel and the claims on them.
	store     store
	lastSweep time.Time // of the last read-back
	localnet  bool      // route_localnet ensured
	last      syncStats
	seed      maphash.Seed // of the shared texts' hashes
}

// syncStats describes the last successful sync, for tests and metrics.
type syncStats struct {
	full                  bool
	filterRules, natRules int // rules written
	filterTotal, natTotal int // rules in our filter / nat chains
	deleted               int // chains deleted
}

// New returns a Proxier for family running the host's iptables flavour.
func New(ctx context.Context, family proxy.IPFamily, opts Options) (*Proxier, error) {
	flavour := opts.Flavour
	if flavour == "" {
		flavour = kiptables.DetectFlavour(ctx)
	}
	ipt, err := kiptables.New(family, flavour)
	if err != nil {
		return nil, fmt.Errorf("iptables %s: %w", family, err)
	}
	return NewWithInterface(family, ipt, opts), nil
}

// NewWithInterface returns a Proxier that programs through ipt (tests pass
// a kiptables.Fake).
func NewWithInterface(family proxy.IPFamily, ipt kiptables.Interface, opts Options) *Proxier {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Proxier{family: family, ipt: ipt, opts: opts, store: newStore(), seed: maphash.MakeSeed()}
}

// Init is part of syncer.Proxier. route_localnet, which localhost node
// ports need, is set by the first sync whose State DNATs them (and, at
// start and in --init-only, by internal/nodesetup).
func (p *Proxier) Init(context.Context) error { return nil }

func (p *Proxier) ensureLocalnet() error {
	if p.localnet || p.opts.EnsureRouteLocalnet == nil {
		return nil
	}
	if err := p.opts.EnsureRouteLocalnet(); err != nil {
		return fmt.Errorf("setting route_localnet for localhost node ports: %w", err)
	}
	p.localnet = true
	return nil
}

// CanaryMissing is part of syncer.Proxier: it reports whether our canary
// chain (KUBE-PROXY-CANARY, as upstream's, in mangle, nat and filter) is
// gone from any table, which means someone flushed iptables (a firewalld
// reload, an admin). The syncer polls it every syncPeriod and answers true
// with a recovery sync, which recreates the canaries, jumps and chains. It
// only reads the kernel, so it may run beside Sync. One tool run lists
// the canaries of all three tables (kiptables.Interface.MissingChain):
// the poll runs on every node all the time.
func (p *Proxier) CanaryMissing(ctx context.Context) (bool, error) {
	t, err := p.ipt.MissingChain(ctx, chainCanary, canaryTables)
	if err != nil {
		return false, fmt.Errorf("checking the canaries: %w", err)
	}
	return t != "", nil
}

// Cleanup is part of syncer.Proxier: it removes this family's jumps and
// chains (--cleanup).
func (p *Proxier) Cleanup(ctx context.Context) error {
	p.cfg, p.entries = nil, nil
	p.store.syncs.Failed()
	return cleanup(ctx, p.ipt)
}
