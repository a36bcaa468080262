//go:build ipvsvm

// The quarantine over the real IPVS backend. Built only with -tags ipvsvm,
// into the test binary hack/ipvs-vm.sh boots in its qemu VM (this kernel has
// no IPVS); inside the VM nothing is skipped.

package syncer_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/quarantinetest"
)

// subnetBroadcast is an endpoint address the API server and the model
// accept and the IPVS kernel refuses as a real server on node1:
// ip_vs_new_dest takes only unicast or local addresses (EINVAL), and this
// one is the broadcast address of node1's own subnet (the fabric,
// 198.18.0.0/24), which only the node's routing table tells. The model
// refuses what any node's kernel would (multicast, link-local, …), so IPv6,
// which has no broadcast, has no such address left.
var subnetBroadcast = netip.MustParseAddr("198.18.0.255")

// withBroadcast adds subnetBroadcast to a Spec's endpoints, as a tenant's
// hand-written EndpointSlice may.
func withBroadcast(s scenario.Spec) scenario.Spec {
	s.TweakSlice = func(f scenario.Fam, sl *discoveryv1.EndpointSlice) {
		ep := *sl.Endpoints[0].DeepCopy()
		ep.Addresses, ep.NodeName, ep.TargetRef = []string{subnetBroadcast.String()}, nil, nil
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return s
}

// ipvsOptions are the Compute options IPVS mode adds (internal/app).
func ipvsOptions(o *desired.Options) {
	o.BindNodePorts = true
	o.PortSettings = ipvs.NewScheduling(kipvs.RoundRobin)
}

// TestVMQuarantineIPVS: in IPVS mode the kernel refuses a real server on
// the broadcast address of the node's subnet. A new Service with one, and
// an update adding one to a programmed Service, are quarantined; the
// healthy Services keep answering a client that connects all the time (and
// after every backend sync) through the search, and the kernel keeps their
// virtual servers, real servers and ipset members. The test goes on
// through a later Service, the periodic full sync that retries the
// offenders, and a restart of the process. IPv4 only: see subnetBroadcast.
func TestVMQuarantineIPVS(t *testing.T) {
	env := scenario.NewEnv(t)
	quarantineIPVS(t, env, scenario.Families[0])
}

// ipvsRun is one family's run: the specs fed so far, the current
// process's world, and the probes of every process.
type ipvsRun struct {
	env    *scenario.Env
	f      scenario.Fam
	file   string
	specs  []scenario.Spec
	w      *scenario.World
	probes []*quarantinetest.Probing
}

func quarantineIPVS(t *testing.T, env *scenario.Env, f scenario.Fam) {
	spread, sticky := env.ServiceNamed(t, "spread"), env.ServiceNamed(t, "sticky")
	first := scenario.Spec{Name: "aaa-first", Slot: 39, Endpoints: []scenario.EPSpec{{Pod: "pod-a"}, {Pod: "pod-r"}}}
	last := scenario.Spec{Name: "zzz-last", Slot: 40, Endpoints: []scenario.EPSpec{{Pod: "pod-b"}}}
	// The offenders have one port each (TCP): every refused port costs
	// the search and each retry backend syncs, seconds each under TCG.
	upd := scenario.Spec{Name: "upd", Slot: 36, Endpoints: []scenario.EPSpec{{Pod: "pod-a"}, {Pod: "pod-c"}}, Tweak: tcpOnly}
	poison := withBroadcast(scenario.Spec{Name: "bcast", Slot: 37, NodePort: 30060, Endpoints: []scenario.EPSpec{{Pod: "pod-a"}}, Tweak: tcpOnly})
	r := &ipvsRun{env: env, f: f, file: filepath.Join(t.TempDir(), "quarantine.json")}
	healthy := []scenario.Spec{spread, sticky, upd, first, last}

	s, refusals := r.start(t, healthy...)
	r.holds(t, "first sync", healthy...)
	loads := r.startLoads(spread, first, last)
	defer r.stopLoads(t, loads)

	// A new Service and an update, both refused, in one partial sync.
	r.feed(poison, withBroadcast(upd))
	r.sync(t, s)
	offenders := append(portsOf(poison), portsOf(upd)...)
	r.quarantined(t, s, "after the search", offenders)
	if refusals.n == 0 {
		t.Fatal("the kernel never refused the broadcast real servers: the test proves nothing")
	}
	t.Logf("the search: %d backend syncs refused", refusals.n)
	r.holds(t, "after the search", healthy...) // upd at its previous version
	r.lacks(t, "after the search", poison)

	// A later Service: one sync, no offender tried again.
	late := scenario.Spec{Name: "late", Slot: 38, Endpoints: []scenario.EPSpec{{Pod: "pod-c"}}}
	before := refusals.n
	r.feed(late)
	r.sync(t, s)
	if refusals.n != before {
		t.Errorf("the unchanged offenders were tried again: %d more refusals", refusals.n-before)
	}
	r.holds(t, "after a later Service", append(healthy, late)...)

	// The periodic full sync keeps the quarantine and retries each
	// offender once, alone.
	before = refusals.n
	syncer.DueFullSync(s)
	r.sync(t, s)
	if got := refusals.n - before; got != len(offenders) {
		t.Errorf("the periodic full sync made %d refused syncs, want one retry per offender (%d)", got, len(offenders))
	}
	r.quarantined(t, s, "after the periodic full sync", offenders)
	r.holds(t, "after the periodic full sync", append(healthy, late)...)
	r.lacks(t, "after the periodic full sync", poison)

	// A restart: a new process (Syncer and backend) over the same kernel
	// and quarantine file.
	s2, refusals2 := r.start(t)
	r.quarantined(t, s2, "after the restart", offenders)
	if refusals2.n != len(offenders) {
		t.Errorf("the restart made %d refused syncs, want one retry per offender (%d)", refusals2.n, len(offenders))
	}
	// The file keeps the version the kernel held for upd, so the new
	// process keeps serving it (docs/architecture.md, "Quarantined at sync").
	r.holds(t, "after the restart", spread, sticky, upd, first, last, late)
	r.lacks(t, "after the restart", poison)
}

// tcpOnly keeps a Spec's TCP port only.
func tcpOnly(svc *v1.Service) { svc.Spec.Ports = svc.Spec.Ports[:1] }

// protocolsOf are the protocols a Spec has ports for.
func protocolsOf(s scenario.Spec) []proxy.Protocol {
	if s.Tweak != nil { // tcpOnly, the only Tweak here
		return []proxy.Protocol{proxy.TCP}
	}
	return scenario.Protocols
}

// refusals counts the backend syncs the kernel refused, and logs each
// backend sync (when, what it took), to line them up with the clients'
// failures if there are any.
type refusals struct {
	syncer.Proxier
	t *testing.T
	n int
}

func (c *refusals) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	start := time.Now()
	err := c.Proxier.Sync(ctx, st, mode)
	verdict := "accepted"
	if err != nil {
		c.n++
		verdict = "refused"
	}
	c.t.Logf("%s backend %s of %d service ports: %s after %v", start.Format("15:04:05.000"), mode, st.Services.Len(),
		verdict, time.Since(start).Round(time.Millisecond))
	return err
}

// start makes a process: a world fed with every spec so far and specs, an
// IPVS backend in node1 and a Syncer over them with the run's quarantine
// file, and runs its first sync. Every backend sync is followed by a probe
// of the Services the loads use.
func (r *ipvsRun) start(t *testing.T, specs ...scenario.Spec) (*syncer.Syncer, *refusals) {
	t.Helper()
	r.specs = append(r.specs, specs...)
	r.w = r.env.NewWorld(r.f).Configure(ipvsOptions)
	r.w.Feed(r.specs...)
	counted := &refusals{Proxier: backendFor(t, r.env, proxy.ModeIPVS, r.f), t: t}
	pp := &quarantinetest.Probing{Proxier: counted, Probe: r.probe}
	r.probes = append(r.probes, pp)
	w := r.w
	s, err := syncer.New(syncer.Options{Family: r.f.Family, Tracker: w.Tracker(), Proxier: syncer.Backend{Proxier: pp, PortHolder: pp},
		Node: func() (desired.Node, bool) { return w.Node(), true }, Compute: w.Options(),
		MinSyncPeriod: time.Second, SyncPeriod: 30 * time.Second, QuarantineFile: r.file})
	if err != nil {
		t.Fatal(err)
	}
	r.sync(t, s)
	return s, counted
}

func (r *ipvsRun) feed(specs ...scenario.Spec) {
	r.specs = append(r.specs, specs...)
	r.w.Feed(specs...)
}

func (r *ipvsRun) sync(t *testing.T, s *syncer.Syncer) {
	t.Helper()
	start := time.Now()
	if err := r.env.Node1.NS.Do(s.SyncOnce); err != nil {
		t.Fatalf("sync: %v", err)
	}
	t.Logf("sync took %v", time.Since(start).Round(time.Millisecond))
}

// probeSlots are the Services the loads and probes ask: spread (10),
// aaa-first (39) and zzz-last (40), first and last in name order, so that a
// search that tried one half of the Services without the other is seen.
var probeSlots = []int{10, 39, 40}

func (r *ipvsRun) probe() error {
	c := r.env.FromClient(r.f)
	c.Timeout = scenario.DropTimeout
	for _, slot := range probeSlots {
		if _, err := c.Ask(proxy.TCP, netip.AddrPortFrom(r.f.ClusterIP(slot), scenario.SvcPort)); err != nil {
			return fmt.Errorf("slot %d: %w", slot, err)
		}
	}
	return nil
}

// startLoads connects from the outside client to spread's cluster IP over
// UDP and to first's and last's over TCP, one request after another (the
// VM has one CPU: more clients would mostly slow the syncs down).
func (r *ipvsRun) startLoads(spread, first, last scenario.Spec) map[string]*scenario.Load {
	loads := map[string]*scenario.Load{}
	for _, l := range []struct {
		s     scenario.Spec
		proto proxy.Protocol
	}{{spread, proxy.UDP}, {first, proxy.TCP}, {last, proxy.TCP}} {
		dst := netip.AddrPortFrom(r.f.ClusterIP(l.s.Slot), scenario.SvcPort)
		loads[fmt.Sprintf("%s %s", l.proto, l.s.Name)] = scenario.StartLoad(r.env.FromClient(r.f), l.proto, dst, 50*time.Millisecond)
	}
	return loads
}

func (r *ipvsRun) stopLoads(t *testing.T, loads map[string]*scenario.Load) {
	t.Helper()
	for what, l := range loads {
		res := l.Stop()
		t.Logf("%s: %d requests answered, %d failed", what, res.Answered, len(res.Failures))
		if len(res.Failures) > 0 || res.Answered == 0 {
			t.Errorf("%s: %d requests failed, %d answered: %v", what, len(res.Failures), res.Answered, res.Failures)
		}
	}
	for i, pp := range r.probes {
		if len(pp.Misses) > 0 {
			t.Errorf("process %d: probed Services did not answer after %d backend syncs (first: %v)", i+1, len(pp.Misses), pp.Misses[0])
		}
	}
}

func portsOf(s scenario.Spec) []proxy.ServicePortName {
	var out []proxy.ServicePortName
	for _, proto := range protocolsOf(s) {
		out = append(out, proxy.ServicePortName{
			ServiceName: proxy.ServiceName{Namespace: scenario.Namespace, Name: s.Name},
			Port:        scenario.PortName(proto), Protocol: proto})
	}
	return out
}

func (r *ipvsRun) quarantined(t *testing.T, s *syncer.Syncer, when string, want []proxy.ServicePortName) {
	t.Helper()
	got := quarantinedNames(s)
	want = slices.SortedFunc(slices.Values(want), proxy.ServicePortName.Compare)
	if !slices.Equal(got, want) {
		t.Errorf("%s: quarantined %v, want %v", when, got, want)
	}
}

// ipvsView is what node1's kernel holds in IPVS mode for one family: the
// virtual servers with their real servers at a weight above 0 (removed ones
// wait at 0 for the reaper), the members of KUBE-CLUSTER-IP and the
// addresses on kube-ipvs0.
type ipvsView struct {
	dests     map[kipvs.ServiceKey][]netip.AddrPort
	clusterIP []kipset.Entry
	onLink    []netip.Addr
}

func (r *ipvsRun) view(t *testing.T) ipvsView {
	t.Helper()
	path := r.env.Node1.NS.Path()
	iv, err := kipvs.New(path)
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	is, err := kipset.New(path)
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close()
	lk, err := klink.New(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	v := ipvsView{dests: map[kipvs.ServiceKey][]netip.AddrPort{}}
	svcs, err := iv.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		ds, err := iv.ListDestinations(s.ServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		v.dests[s.ServiceKey] = []netip.AddrPort{}
		for _, d := range ds {
			if d.Weight > 0 {
				v.dests[s.ServiceKey] = append(v.dests[s.ServiceKey], d.Addr)
			}
		}
		slices.SortFunc(v.dests[s.ServiceKey], netip.AddrPort.Compare)
	}
	set := "KUBE-CLUSTER-IP"
	if r.f.V6 {
		set = "KUBE-6-CLUSTER-IP"
	}
	if v.clusterIP, err = is.ListEntries(set); err != nil {
		t.Fatal(err)
	}
	if v.onLink, err = lk.ListAddrs(ipvs.DummyLink); err != nil {
		t.Fatal(err)
	}
	return v
}

// holds checks that each spec's cluster IP has, for every protocol, a
// virtual server whose real servers are exactly its pods, a member of
// KUBE-CLUSTER-IP, and its address on kube-ipvs0.
func (r *ipvsRun) holds(t *testing.T, when string, specs ...scenario.Spec) {
	t.Helper()
	v := r.view(t)
	for _, s := range specs {
		var want []netip.AddrPort
		for _, ep := range s.Endpoints {
			want = append(want, netip.AddrPortFrom(r.env.Pods[ep.Pod].IP(r.f.V6), scenario.PodPort))
		}
		slices.SortFunc(want, netip.AddrPort.Compare)
		ip := r.f.ClusterIP(s.Slot)
		for _, proto := range protocolsOf(s) {
			k := kipvs.ServiceKey{Addr: ip, Protocol: ipvs.ProtocolOf(proto), Port: scenario.SvcPort}
			if got, ok := v.dests[k]; !ok || !slices.Equal(got, want) {
				t.Errorf("%s: %s: virtual server %s present %v with real servers %v, want %v", when, s.Name, k, ok, got, want)
			}
			if e := clusterIPEntry(ip, proto); !slices.Contains(v.clusterIP, e) {
				t.Errorf("%s: %s: KUBE-CLUSTER-IP lacks %s", when, s.Name, e)
			}
		}
		if !slices.Contains(v.onLink, ip) {
			t.Errorf("%s: %s: %s not on %s", when, s.Name, ip, ipvs.DummyLink)
		}
	}
}

// lacks checks that nothing of each spec's cluster IP is in the kernel.
func (r *ipvsRun) lacks(t *testing.T, when string, specs ...scenario.Spec) {
	t.Helper()
	v := r.view(t)
	for _, s := range specs {
		ip := r.f.ClusterIP(s.Slot)
		for _, proto := range protocolsOf(s) {
			k := kipvs.ServiceKey{Addr: ip, Protocol: ipvs.ProtocolOf(proto), Port: scenario.SvcPort}
			if got, ok := v.dests[k]; ok {
				t.Errorf("%s: %s: virtual server %s is in the kernel (real servers %v)", when, s.Name, k, got)
			}
			if e := clusterIPEntry(ip, proto); slices.Contains(v.clusterIP, e) {
				t.Errorf("%s: %s: KUBE-CLUSTER-IP holds %s", when, s.Name, e)
			}
		}
		if slices.Contains(v.onLink, ip) {
			t.Errorf("%s: %s: %s is on %s", when, s.Name, ip, ipvs.DummyLink)
		}
	}
}

func clusterIPEntry(ip netip.Addr, proto proxy.Protocol) kipset.Entry {
	return kipset.Entry{IP: ip, Protocol: uint8(ipvs.ProtocolOf(proto)), Port: scenario.SvcPort}
}

// quarantinedNames are the service ports s keeps quarantined, in order.
func quarantinedNames(s *syncer.Syncer) []proxy.ServicePortName {
	var names []proxy.ServicePortName
	for _, q := range s.Report().Quarantined {
		names = append(names, q.Name)
	}
	slices.SortFunc(names, proxy.ServicePortName.Compare)
	return names
}
