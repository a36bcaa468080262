package syncer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// scaleName is the i-th Service of a large fixture.
func scaleName(i int) string { return fmt.Sprintf("s%05d", i) }

// addScaleServices adds Services scaleName(from) … scaleName(to-1); those
// whose index is in poison use poisonPort.
func addScaleServices(f *fixture, from, to int, poison map[int]bool) {
	for i := from; i < to; i++ {
		port := int32(80)
		if poison[i] {
			port = poisonPort
		}
		ip := fmt.Sprintf("172.30.%d.%d", 1+i/250, 1+i%250)
		f.tracker.OnServiceUpdate(nil, svcNamed(scaleName(i), ip, port))
	}
}

// spread picks k indexes spread evenly over [from, from+n).
func spread(from, n, k int) map[int]bool {
	out := map[int]bool{}
	for j := range k {
		out[from+j*n/k+n/(2*k)] = true
	}
	return out
}

// checkScaleOutcome checks that every healthy port of n is programmed and
// every offender quarantined.
func checkScaleOutcome(t *testing.T, f *fixture, p *poisonProxier, n int, poison map[int]bool) {
	t.Helper()
	if got, want := p.programmed.Len(), n-len(poison); got != want {
		t.Errorf("%d ports programmed, want the %d healthy ones", got, want)
	}
	if len(f.syncer.quarantined) != len(poison) {
		t.Errorf("%d ports quarantined, want %d", len(f.syncer.quarantined), len(poison))
	}
	for i := range poison {
		if f.syncer.quarantined[portOf(scaleName(i))] == nil {
			t.Errorf("offender %s not quarantined", scaleName(i))
		}
	}
}

// A full sync that meets offenders at 10k service ports: the search starts
// from what the kernel already serves, so no healthy port leaves the kernel
// while it runs, and its cost follows the offenders, not the ports.
func TestQuarantineFullSyncAtScaleKeepsHealthyPorts(t *testing.T) {
	const healthy = 10000
	for _, k := range []int{1, 3, 10, 50} {
		t.Run(fmt.Sprintf("%d offenders", k), func(t *testing.T) {
			f, p, _ := newPoisonFixture(t)
			addScaleServices(f, 0, healthy, nil)
			f.markSynced()
			if err := f.syncer.syncOnce(); err != nil {
				t.Fatal(err)
			}
			// New ports, offenders among them, meet a full sync.
			poison := spread(healthy, 2*k, k)
			addScaleServices(f, healthy, healthy+2*k, poison)
			f.syncer.RequestFull()
			calls := p.count()
			if err := f.syncer.syncOnce(); err != nil {
				t.Fatalf("full sync with %d offenders: %v", k, err)
			}
			t.Logf("%d offenders among %d service ports: %d Proxier syncs, %d rejected", k, healthy+2*k, p.count()-calls, p.rejected)
			if p.dropped != 0 {
				t.Errorf("healthy ports left the kernel %d times during the search", p.dropped)
			}
			checkScaleOutcome(t, f, p, healthy+2*k, poison)
		})
	}
}

// The first sync of a process has nothing programmed to start from: the
// search grows from nothing, never takes back a port once programmed, and
// finds many offenders among 10k ports within its budget.
func TestQuarantineFirstSyncAtScaleFindsEveryOffender(t *testing.T) {
	const n = 10000
	for _, k := range []int{1, 3, 10, 50} {
		t.Run(fmt.Sprintf("%d offenders", k), func(t *testing.T) {
			f, p, _ := newPoisonFixture(t)
			poison := spread(0, n, k)
			addScaleServices(f, 0, n, poison)
			f.markSynced()
			if err := f.syncer.syncOnce(); err != nil {
				t.Fatalf("first sync with %d offenders among %d: %v", k, n, err)
			}
			t.Logf("%d offenders among %d service ports: %d Proxier syncs, %d rejected", k, n, p.count(), p.rejected)
			if p.dropped != 0 {
				t.Errorf("programmed healthy ports left the kernel %d times during the search", p.dropped)
			}
			checkScaleOutcome(t, f, p, n, poison)
		})
	}
}

// A rejected update stays quarantined and visible: the kernel keeps the
// version it served before, and later syncs neither forget the quarantine
// nor try the rejected version again.
func TestQuarantineKeepsARejectedUpdate(t *testing.T) {
	f, p, reported := newPoisonFixture(t)
	f.tracker.OnServiceUpdate(nil, svcNamed("web", "172.30.1.1", 80))
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	f.tracker.OnServiceUpdate(nil, svcNamed("web", "172.30.1.1", poisonPort))
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*reported, []proxy.ServicePortName{portOf("web")}) {
		t.Fatalf("reported %v, want ns/web:p", *reported)
	}
	rejected := p.rejected
	for i := range 3 {
		f.tracker.OnServiceUpdate(nil, svcNamed(fmt.Sprintf("other%d", i), fmt.Sprintf("172.30.2.%d", i+1), 80))
		if err := f.syncer.syncOnce(); err != nil {
			t.Fatal(err)
		}
		if sp, _ := p.programmed.Get(portOf("web")); sp == nil || sp.Port != 80 {
			t.Errorf("sync %d: the kernel holds %v for the quarantined update, want the previous version (port 80)", i, sp)
		}
		if g := gaugeValue(t, metrics.QuarantinedServicePorts.WithLabelValues("IPv4")); g != 1 || f.syncer.quarantined[portOf("web")] == nil {
			t.Errorf("sync %d: quarantine gauge %v (entries %d), want the rejected update still quarantined", i, g, len(f.syncer.quarantined))
		}
	}
	if p.rejected != rejected {
		t.Errorf("the rejected version was tried %d more times without changing", p.rejected-rejected)
	}
}

// lbService is a LoadBalancer Service on port with an ingress IP and the
// given source ranges.
func lbService(port int32, ranges ...string) *v1.Service {
	svc := svcNamed("lb", "172.30.1.1", port)
	svc.Spec.Type = v1.ServiceTypeLoadBalancer
	svc.Spec.Ports[0].NodePort = 30080
	svc.Spec.LoadBalancerSourceRanges = ranges
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	return svc
}

// While a rejected update narrows loadBalancerSourceRanges, the wider
// ranges must not stay open: the load-balancer frontends are withdrawn.
func TestQuarantineNarrowedSourceRangesDoNotStayOpen(t *testing.T) {
	f, p, _ := newPoisonFixture(t)
	f.tracker.OnServiceUpdate(nil, lbService(80))
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	if sp, _ := p.programmed.Get(portOf("lb")); sp == nil || len(sp.LoadBalancerIPs) != 1 {
		t.Fatalf("LB port programmed as %+v, want its LB IP", sp)
	}
	f.tracker.OnServiceUpdate(nil, lbService(poisonPort, "203.0.113.0/24"))
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	sp, _ := p.programmed.Get(portOf("lb"))
	if sp == nil {
		t.Fatal("the cluster IP of the quarantined port is gone; only its LB frontends should be")
	}
	if len(sp.LoadBalancerIPs) != 0 {
		t.Errorf("the kernel keeps LB IPs %v open to %v after the update to 203.0.113.0/24 was rejected", sp.LoadBalancerIPs, sp.AllowedSources)
	}
	// Widening is safe: the previous, narrower version stays whole.
	f2, p2, _ := newPoisonFixture(t)
	f2.tracker.OnServiceUpdate(nil, lbService(80, "203.0.113.0/24"))
	f2.markSynced()
	if err := f2.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	f2.tracker.OnServiceUpdate(nil, lbService(poisonPort, "203.0.113.0/24", "198.51.100.0/24"))
	if err := f2.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	if sp, _ := p2.programmed.Get(portOf("lb")); sp == nil || len(sp.LoadBalancerIPs) != 1 ||
		!slices.Contains(sp.AllowedSources, netip.MustParsePrefix("203.0.113.0/24")) {
		t.Errorf("after a rejected widening the kernel holds %+v, want the previous version", sp)
	}
}

// The periodic full sync keeps the quarantine and retries each offender
// once, alone, on top of everything else: the healthy ports stay
// programmed, and a cause that has passed releases the port.
func TestQuarantineSurvivesThePeriodicFullSync(t *testing.T) {
	f, p, _ := newPoisonFixture(t)
	addScaleServices(f, 0, 200, spread(0, 200, 2))
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	rejected, calls := p.rejected, p.count()
	f.clock.Step(FullSyncPeriod)
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	if len(f.syncer.quarantined) != 2 || p.dropped != 0 {
		t.Errorf("after the periodic full sync: %d quarantined, healthy ports dropped %d times", len(f.syncer.quarantined), p.dropped)
	}
	if p.rejected-rejected != 2 {
		t.Errorf("%d rejected attempts in the periodic full sync (%d syncs), want one retry per offender", p.rejected-rejected, p.count()-calls)
	}
	p.cured = true
	f.clock.Step(FullSyncPeriod)
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	if len(f.syncer.quarantined) != 0 || p.programmed.Len() != 200 {
		t.Errorf("after the cause passed: %d still quarantined, %d programmed", len(f.syncer.quarantined), p.programmed.Len())
	}
}

// A failure two Services cause together is blamed on the one that came
// last, whatever the names; a full sync does not move the blame.
func TestQuarantineBlamesTheNewcomerNotNameOrder(t *testing.T) {
	f, p, reported := newPoisonFixture(t)
	p.pair = [2]string{"aa-intruder", "zz-victim"}
	f.tracker.OnServiceUpdate(nil, svcNamed("zz-victim", "172.30.1.1", 80))
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	f.tracker.OnServiceUpdate(nil, svcNamed("aa-intruder", "172.30.1.2", 80))
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	for _, full := range []string{"requested", "periodic"} {
		if full == "requested" {
			f.syncer.RequestFull()
		} else {
			f.clock.Step(FullSyncPeriod)
		}
		if err := f.syncer.syncOnce(); err != nil {
			t.Fatal(err)
		}
		if !has(p.programmed, portOf("zz-victim")) || has(p.programmed, portOf("aa-intruder")) {
			t.Errorf("after a %s full sync the kernel holds %v, want the victim and not the intruder", full, programmedNames(p))
		}
		if p.dropped != 0 {
			t.Errorf("after a %s full sync: the victim left the kernel %d times", full, p.dropped)
		}
	}
	if !slices.Equal(*reported, []proxy.ServicePortName{portOf("aa-intruder")}) {
		t.Errorf("reported %v, want only the intruder", *reported)
	}
}

// A restart keeps what the previous process learnt: the ports it
// quarantined stay out of the first sync, so the rules the kernel still
// holds for the healthy ports are never taken back, and each is retried
// alone once right after.
func TestQuarantineKeptAcrossARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "quarantine-IPv4.json")
	poison := spread(0, 200, 2)
	start := func(kernel model.PortMap[*desired.ServicePort]) (*fixture, *poisonProxier) {
		f, p, _ := newPoisonFixture(t)
		f.syncer.o.QuarantineFile = file
		f.syncer.loadQuarantine()
		p.programmed = kernel
		addScaleServices(f, 0, 200, poison)
		f.markSynced()
		if err := f.syncer.syncOnce(); err != nil {
			t.Fatal(err)
		}
		return f, p
	}
	_, first := start(model.PortMap[*desired.ServicePort]{})
	f, p := start(first.programmed)
	if p.dropped != 0 {
		t.Errorf("the restart's first sync took healthy ports out of the kernel %d times", p.dropped)
	}
	if p.rejected != len(poison) {
		t.Errorf("%d rejected attempts at the restart, want one retry per offender (%d)", p.rejected, len(poison))
	}
	checkScaleOutcome(t, f, p, 200, poison)

	// A port fixed while no process ran is released by the retry: it is
	// out of the kernel only between the first sync and its retry.
	kept := `[{"namespace":"ns","name":"s00010","port":"p","protocol":"TCP"},
		{"namespace":"ns","name":"s00050","port":"p","protocol":"TCP"},
		{"namespace":"ns","name":"s00150","port":"p","protocol":"TCP"}]`
	if err := os.WriteFile(file, []byte(kept), 0o600); err != nil {
		t.Fatal(err)
	}
	f, p = start(first.programmed)
	if len(f.syncer.quarantined) != len(poison) || !has(p.programmed, portOf("s00010")) || p.dropped > 1 {
		t.Errorf("a port kept in the file but accepted now: %d quarantined, programmed %v, %d healthy drops",
			len(f.syncer.quarantined), has(p.programmed, portOf("s00010")), p.dropped)
	}
}

// portHoldingProxier is a poisonProxier that tells which ports of a State its
// kernel holds as they are (PortHolder).
type portHoldingProxier struct {
	*poisonProxier
	asked int
	err   error // HeldPorts fails when set
}

func (p *portHoldingProxier) HeldPorts(_ context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	p.asked++
	if p.err != nil {
		return nil, p.err
	}
	held := map[proxy.ServicePortName]struct{}{}
	for name, sp := range st.Services.All() {
		if k, ok := p.programmed.Get(name); ok && k.Equal(sp) {
			held[name] = struct{}{}
		}
	}
	return held, nil
}

// previousKernel is what a process that synced the healthy ports 0…n-1
// left in the kernel.
func previousKernel(t *testing.T, n int) model.PortMap[*desired.ServicePort] {
	t.Helper()
	f, p, _ := newPoisonFixture(t)
	addScaleServices(f, 0, n, nil)
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	return p.programmed
}

// newHoldingFixture is a new process over kernel whose Proxier tells which
// ports it holds (failing with heldErr, if set).
func newHoldingFixture(t *testing.T, kernel model.PortMap[*desired.ServicePort], heldErr error) (*fixture, *portHoldingProxier) {
	f, pp, _ := newPoisonFixture(t)
	p := &portHoldingProxier{poisonProxier: pp, err: heldErr}
	f.syncer.o.Proxier = Backend{Proxier: p, PortHolder: p}
	pp.programmed = kernel
	return f, p
}

// A restarted process meets offenders it never saw, without a quarantine
// kept for it: its first sync has no accepted State, and the search starts
// from the ports the kernel already holds as they are. None of those ever
// leaves the kernel while the search runs.
func TestQuarantineFirstSyncOverHeldPortsAtScale(t *testing.T) {
	const healthy = 10000
	for _, k := range []int{1, 3, 10, 50} {
		t.Run(fmt.Sprintf("%d offenders", k), func(t *testing.T) {
			f, p := newHoldingFixture(t, previousKernel(t, healthy), nil)
			pp := p.poisonProxier
			// Created while no process ran: new ports, offenders among them.
			poison := spread(healthy, 2*k, k)
			addScaleServices(f, 0, healthy+2*k, poison)
			f.markSynced()
			if err := f.syncer.syncOnce(); err != nil {
				t.Fatalf("first sync with %d offenders: %v", k, err)
			}
			t.Logf("%d offenders among %d service ports, %d held by the kernel: %d Proxier syncs, %d rejected",
				k, healthy+2*k, healthy, p.count(), p.rejected)
			if p.asked == 0 {
				t.Error("the syncer never asked which ports the kernel holds")
			}
			if p.dropped != 0 {
				t.Errorf("ports the kernel held left it %d times during the search", p.dropped)
			}
			checkScaleOutcome(t, f, pp, healthy+2*k, poison)
		})
	}
}

// What the first sync's search starts from when the kernel holds some
// ports in another version, when the held ports are rejected themselves,
// and when the Proxier cannot tell: every offender is found in each case,
// and only the ports the kernel does not hold as they are leave it.
func TestQuarantineFirstSyncBase(t *testing.T) {
	const n = 200
	for _, tc := range []struct {
		name string
		// kernelPort: ports the previous process left on another port
		// number; a port left on poisonPort the kernel refuses now, and
		// it is still desired so.
		kernelPort map[int]int32
		heldErr    error
		// dropped: the healthy ports that leave the kernel during the
		// search; -1 for a search from none, which takes out any.
		dropped int
	}{
		{name: "all held"},
		{name: "one held in another version", kernelPort: map[int]int32{7: 8080}, dropped: 1},
		{name: "a held port rejected now", kernelPort: map[int]int32{7: poisonPort}, dropped: -1},
		{name: "the Proxier cannot tell", heldErr: errors.New("netlink: no answer"), dropped: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			poison := spread(0, n, 2)
			kernel := previousKernel(t, n)
			for i := range poison {
				kernel = kernel.Without(portOf(scaleName(i)))
			}
			for i, port := range tc.kernelPort {
				sp, _ := kernel.Get(portOf(scaleName(i)))
				old := *sp
				old.Port = uint16(port)
				kernel = kernel.With(old.Name, &old)
				if port == poisonPort {
					poison[i] = true
				}
			}
			f, p := newHoldingFixture(t, kernel, tc.heldErr)
			pp := p.poisonProxier
			addScaleServices(f, 0, n, poison)
			f.markSynced()
			if err := f.syncer.syncOnce(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d Proxier syncs, %d rejected, %d healthy ports left the kernel meanwhile", pp.count(), pp.rejected, pp.dropped)
			if tc.dropped >= 0 && pp.dropped != tc.dropped {
				t.Errorf("%d healthy ports left the kernel during the search, want %d", pp.dropped, tc.dropped)
			}
			checkScaleOutcome(t, f, pp, n, poison)
		})
	}
}
