package app

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/conntrack"
	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/healthz"
	"github.com/svcproxy/svcproxy/internal/leftovers"
	"github.com/svcproxy/svcproxy/internal/localapi"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/internal/nodestatus"
	"github.com/svcproxy/svcproxy/internal/servicehealth"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// daemon is one running svcproxy: its servers, informers and one syncer per
// IP family.
type daemon struct {
	cfg *config.Config
	// registry is the table of backends (backends.Table but in tests),
	// backend the mode's row in it.
	registry backends.Registry
	backend  *backends.Backend
	logger   klog.Logger
	client   kubernetes.Interface
	// pages reads the pages of a list after its first, without the
	// client's rate limiter (watch.Options.ContinuePages).
	pages     kubernetes.Interface
	nodeName  string
	node      *nodeView
	nodeInfo  watch.NodeInfo
	health    *healthz.Server
	svcHealth *servicehealth.Server
	events    *eventSink
	// state keeps the last programmed State per family for
	// `svcproxy explain` (served on the local API's unix socket).
	state *debugstate.Recorder
	// syncers are the IP families' sync loops once they exist, and
	// flavour the iptables flavour (iptables and IPVS modes), for
	// `svcproxy status` (status.go).
	syncers atomic.Pointer[map[proxy.IPFamily]*syncer.Syncer]
	flavour kiptables.Flavour
	// fatal receives errors that must stop the process: a listener failure
	// under bindAddressHardFail, or a change to this Node that upstream
	// answers by exiting.
	fatal chan error
}

func newDaemon(ctx context.Context, cfg *config.Config, reg backends.Registry) (*daemon, error) {
	b, err := reg.Lookup(cfg.Mode)
	if err != nil {
		return nil, err
	}
	name, err := nodeName(cfg.HostnameOverride)
	if err != nil {
		return nil, err
	}
	rc, err := RESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	client, pages, err := newClients(rc)
	if err != nil {
		return nil, err
	}
	d := &daemon{
		cfg:      cfg,
		registry: reg,
		backend:  b,
		logger:   klog.FromContext(ctx),
		client:   client,
		pages:    pages,
		nodeName: name,
		node:     newNodeView(name, cfg.BindAddress),
		health:   healthz.New(cfg.SyncPeriod, clock.RealClock{}),
		events:   newEventSink(ctx, client, name),
		state:    debugstate.NewRecorder(),
		fatal:    make(chan error, 4),
	}
	// The host's addresses are listed again only after the kernel announces
	// a change, not on every sync: under churn a listing per sync (a dump per
	// interface) added up to tens of megabytes a minute of garbage.
	links := reg.Links()
	hostAddrs := klink.NewAddrCache(func() []netip.Addr { return interfaceAddrs(links) })
	context.AfterFunc(ctx, hostAddrs.Close)
	d.node.hostAddrs = hostAddrs.Addrs
	d.svcHealth = servicehealth.New(d.health.Healthy, d.events.healthCheckFailed)
	return d, nil
}

// nodeName is --hostname-override, already normalized by config, or the
// lowercased OS hostname.
func nodeName(override string) (string, error) {
	if override != "" {
		return override, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading hostname: %w", err)
	}
	return strings.ToLower(strings.TrimSpace(h)), nil
}

// run serves health and metrics, programs the kernel and blocks until ctx
// ends or something fatal happens.
func (d *daemon) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer d.svcHealth.Close()
	// The lists of Services and EndpointSlices start first: at scale they
	// are most of a start, and reading them only needs the API server.
	families := d.backend.Families()
	feed, err := d.startFeed(ctx, families)
	if err != nil {
		return err
	}
	// As upstream: nothing listens and nothing is set up before this Node
	// exists; then the startup checks, which may refuse the config.
	nodeWatcher, err := d.awaitNode(ctx)
	if err != nil {
		return err
	}
	if err := d.checkConfig(); err != nil {
		return err
	}
	// Before anything can stop decapsulating: this start's first sync, or
	// the drain of an earlier start's tc programs.
	d.withdrawDSR(ctx)
	if err := setupNode(ctx, d.cfg, d.backend); err != nil {
		return err
	}
	inst, err := openBackend(ctx, d.backend, d.cfg, families, false)
	if err != nil {
		return err
	}
	defer inst.Close()
	d.flavour = inst.IPTablesFlavour
	d.serve(ctx, inst.Metrics)
	closeLocal := d.serveLocal()
	defer closeLocal() // removes the socket before the process exits
	conntrackClient, err := kconntrack.New()
	if err != nil {
		return fmt.Errorf("opening the conntrack netlink socket: %w", err)
	}
	defer conntrackClient.Close()
	firstSyncs := newFirstSyncs(families)
	syncers, err := d.newSyncers(ctx, inst, feed, conntrackClient, firstSyncs)
	if err != nil {
		return err
	}
	d.syncers.Store(&syncers)
	d.cleanupAfter(ctx, firstSyncs.done)
	_ = d.advertiseDSRAfter(ctx, firstSyncs.done) // renews until ctx ends
	for _, s := range syncers {
		s.Prepare(ctx) // reads the kernel back beside the lists and the cleanup
	}
	if err := d.watchNode(ctx, nodeWatcher, syncers); err != nil {
		return fmt.Errorf("watching Node %q: %w", d.nodeName, err)
	}
	lists, err := d.watchClusterLists(ctx, syncers)
	if err != nil {
		return err
	}
	d.events.starting()
	d.awaitInitialLists(ctx, lists)
	for _, s := range syncers {
		go s.Loop(ctx)
	}
	d.logger.Info("svcproxy started", "mode", d.cfg.Mode, "node", d.nodeName, "families", families)
	return d.awaitFatal(ctx)
}

// cleanupAfter removes the other proxy modes' leftovers once this mode's
// rules are live (synced is closed when every family has synced once):
// make before break. Upstream removes them before its first sync, which
// leaves a node switching modes without Service rules until that sync;
// here the old mode's rules go on serving until then. Both rule sets
// express the same Services meanwhile, and a connection is translated
// once, by whichever sees it first (docs/user/migration.md). A mode that never
// syncs leaves the old rules in place, as a restart of the old mode would
// find them.
func (d *daemon) cleanupAfter(ctx context.Context, synced <-chan struct{}) {
	if d.cfg.ServiceProxyName != "" {
		// Beside kube-proxy on a canary subset of Services, the "other
		// mode's leftovers" are kube-proxy's live rules: leave them alone.
		d.logger.Info("Not cleaning up other proxy modes: --service-proxy-name is set", "name", d.cfg.ServiceProxyName)
		return
	}
	go func() {
		select {
		case <-synced:
		case <-ctx.Done():
			return
		}
		if err := leftovers.OtherModes(ctx, d.registry, d.cfg.Mode, d.cfg); err != nil {
			d.logger.Error(err, "Cleaning up other proxy modes' rules failed")
		}
	}()
}

// serve starts the metrics and health servers (each disabled by an empty
// address); backendMetrics are the backend instance's metrics options.
func (d *daemon) serve(ctx context.Context, backendMetrics []metrics.Option) {
	var metricsFail, healthzFail chan<- error
	if d.cfg.BindAddressHardFail {
		metricsFail = d.hardFail("FailedToStartMetricServer")
		healthzFail = d.hardFail("FailedToStartProxierHealthcheck")
	}
	gatherer, err := registerMetrics(d.cfg, d.backend, backendMetrics)
	if err != nil {
		d.logger.Error(err, "Registering metrics failed")
	}
	if addr := d.cfg.MetricsBindAddress; addr != "" {
		go metrics.Serve(ctx, metrics.ServeOptions{Name: "metrics", Addr: addr, Handler: d.metricsHandler(gatherer), HardFail: metricsFail})
	}
	if addr := d.cfg.HealthzBindAddress; addr != "" {
		go d.health.Serve(ctx, addr, healthzFail)
	}
}

// metricsHandler is what the metrics server (metricsBindAddress) serves.
func (d *daemon) metricsHandler(gatherer prometheus.Gatherer) http.Handler {
	return metrics.NewHandler(metrics.HandlerOptions{
		Gatherer:        gatherer,
		Mode:            string(d.cfg.Mode),
		Config:          configzObject(d.cfg),
		EnableProfiling: d.cfg.EnableProfiling,
		ZPages: &metrics.ZPages{
			Component: reportingController, Flags: d.cfg.Flags, Started: processStart,
			BinaryVersion: Version, EmulationVersion: config.UpstreamVersion,
			Paths: []string{"/configz", "/flagz", "/healthz", "/metrics", "/proxyMode", "/statusz"},
		},
	})
}

// serveLocal serves the local API on the unix socket --state-socket (none
// if it is empty) and returns what closes it and removes the socket. The
// programmed state is served there, not on the metrics port: it lists every
// Service and endpoint of the cluster, and the socket is root's alone. A
// failure is logged, not fatal: the socket serves operators, not traffic.
func (d *daemon) serveLocal() (closeLocal func()) {
	path := d.cfg.StateSocket
	if path == "" {
		return func() {}
	}
	srv, err := localapi.Start(path, map[string]http.Handler{
		debugstate.Path: d.state.Handler(debugstate.HandlerOptions{Mode: string(d.cfg.Mode)}),
		nodestatus.Path: nodestatus.Handler(d.status),
	})
	if err != nil {
		d.logger.Error(err, "Serving the state socket failed: svcproxy explain will not work on this node", "path", path)
		return func() {}
	}
	return func() {
		if err := srv.Close(); err != nil {
			d.logger.Error(err, "Closing the state socket", "path", path)
		}
	}
}

// newSyncers builds one syncer per family on the feed's tracker and
// connects the feed's sync requests to it.
func (d *daemon) newSyncers(ctx context.Context, inst *backends.Instance, feed *feed, ct kconntrack.Interface, first *firstSyncs) (map[proxy.IPFamily]*syncer.Syncer, error) {
	proxiers := inst.Proxiers
	syncers := make(map[proxy.IPFamily]*syncer.Syncer, len(proxiers))
	gc := newGCTuner(slices.Collect(maps.Keys(proxiers)))
	settings := d.settingWarner()
	for _, family := range proxy.Families {
		p, ok := proxiers[family]
		tracker := feed.trackers[family]
		if !ok || tracker == nil {
			continue
		}
		compute := d.backend.Options(d.cfg, family)
		afterSync := chainAfterSync(d.afterSync(compute, reconcilers(ctx, family, ct, inst), settings), gc.afterSync(family), first.afterSync(family))
		if serve := localhostProxy(ctx, compute); serve != nil {
			afterSync = chainAfterSync(afterSync, serve)
		}
		s, err := syncer.New(syncer.Options{
			Family:         family,
			SyncFailures:   d.backend.SyncFailures,
			Tracker:        tracker,
			Proxier:        withFaults(p, d.cfg.Mode, family),
			Node:           d.node.get,
			Compute:        compute,
			Health:         d.health,
			ServiceHealth:  d.svcHealth,
			MinSyncPeriod:  d.cfg.MinSyncPeriod,
			SyncPeriod:     d.cfg.SyncPeriod,
			AfterSync:      afterSync,
			AfterReadBack:  gc.afterReadBack(),
			ExpectedSize:   feed.sizes.expected(family),
			Quarantined:    d.events.quarantined,
			QuarantineFile: quarantineFile(d.cfg, family),
			FrontendsLost:  d.events.frontendsLost,
		})
		if err != nil {
			return nil, fmt.Errorf("creating %s syncer: %w", family, err)
		}
		syncers[family] = s
		feed.connect(family, s)
	}
	return syncers, nil
}

// settingWarner is the one warner, shared by the families' syncers, of
// the extension annotations the mode refuses, worded by its row; nil when
// the row words none.
func (d *daemon) settingWarner() *settingWarner {
	refused := d.backend.RefusedSetting
	if refused == nil {
		return nil
	}
	return newSettingWarner(func(svc proxy.ServiceName, value string) { d.events.refusedSetting(svc, refused(value)) })
}

// reconcilers starts the removal of family's stale UDP/SCTP flows beside
// the sync, never inside it: conntrack's, and those of the instance's
// stale-flow table (ebpf mode's translated sockets) by the same rule. It
// returns what observes each State.
func reconcilers(ctx context.Context, family proxy.IPFamily, ct kconntrack.Interface, inst *backends.Instance) func(*desired.State, model.Changes) {
	r := conntrack.New(family, ct, conntrack.Options{})
	go r.Run(ctx)
	observe := []func(*desired.State, model.Changes){r.Observe}
	for _, t := range inst.StaleFlows[family] {
		tr := conntrack.New(family, t.Table, conntrack.Options{Table: t.Name, Report: func(conntrack.Result, time.Duration) {}})
		go tr.Run(ctx)
		observe = append(observe, tr.Observe)
	}
	return chainAfterSync(observe...)
}

// quarantineFile is where a family's quarantine is kept for the next
// process: beside the state socket, in svcproxy's root-only directory
// (none without a socket). One per mode: what one backend's kernel refuses,
// another's may take.
func quarantineFile(cfg *config.Config, family proxy.IPFamily) string {
	if cfg.StateSocket == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(cfg.StateSocket), fmt.Sprintf("quarantine-%s-%s.json", cfg.Mode, family))
}

// afterSync is what runs after each successful sync: the debug state for
// `svcproxy explain`, the conntrack reconciler, and where the mode decides
// settings of its own (IPVS mode's schedulers) the check of the extension
// annotations it refused.
func (d *daemon) afterSync(compute desired.Options, reconcile func(*desired.State, model.Changes), settings *settingWarner) func(*desired.State, model.Changes) {
	hooks := []func(*desired.State, model.Changes){d.state.Record, reconcile}
	if compute.PortSettings != nil && settings != nil {
		hooks = append(hooks, settings.observe)
	}
	return chainAfterSync(hooks...)
}
