package syncer

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// pathBench is the shared pipeline of one family without the API server
// and the kernel: a tracker holding services × 10 endpoints, a syncer on
// the real clock, and a Proxier that only tells when it is called. An
// event is what pkg/pipeline/watch does with one (the tracker takes it, the
// syncer is asked), so event → Sync is the syncer's wake-up, Commit and
// Compute, and event → AfterSync the whole sync but the backend's work.
type pathBench struct {
	tracker *model.Tracker
	syncer  *Syncer
	// synced is told each time Proxier.Sync is entered, done each time a
	// successful sync has run its AfterSync.
	synced, done chan struct{}
	// slices holds two versions of each Service's slice, which events
	// alternate between: every event differs from what was committed.
	slices  [][2]*discoveryv1.EndpointSlice
	current []int
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// signalProxier tells of every Sync; it keeps nothing.
type signalProxier struct{ synced chan<- struct{} }

func (p signalProxier) Init(context.Context) error                  { return nil }
func (p signalProxier) Cleanup(context.Context) error               { return nil }
func (p signalProxier) CanaryMissing(context.Context) (bool, error) { return false, nil }
func (p signalProxier) Sync(context.Context, *desired.State, proxy.SyncMode) error {
	p.synced <- struct{}{}
	return nil
}

func newPathBench(b *testing.B, services int, minSync time.Duration) *pathBench {
	b.Helper()
	pb := &pathBench{tracker: model.NewTracker(proxy.IPv4), synced: make(chan struct{}, 1024), done: make(chan struct{}, 1024),
		slices: make([][2]*discoveryv1.EndpointSlice, services), current: make([]int, services)}
	ports := []proxytest.SlicePort{{Name: "http", Port: 8080, Protocol: v1.ProtocolTCP}}
	for i := range services {
		name := fmt.Sprintf("svc-%05d", i)
		ip := fmt.Sprintf("172.30.%d.%d", i>>8, i&0xff)
		pb.tracker.OnServiceUpdate(nil, proxytest.MakeService("ns", name, func(svc *v1.Service) {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip, []string{ip}
			svc.Spec.Ports = []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}}
		}))
		for v := range pb.slices[i] {
			eps := make([]proxytest.EP, 10)
			for j := range eps {
				eps[j] = proxytest.EP{IP: netip.AddrFrom4([4]byte{10, byte(j + 10*v), byte(i >> 8), byte(i)}), Node: proxytest.NodeName}
			}
			pb.slices[i][v] = proxytest.Slice("ns", name, ports, eps...)
		}
		pb.tracker.OnEndpointSliceUpdate(nil, pb.slices[i][0])
	}
	pb.tracker.OnServicesSynced()
	pb.tracker.OnEndpointSlicesSynced()
	node := proxytest.NodeOf(proxytest.MakeNode(proxytest.NodeName, nil))
	s, err := New(Options{
		Family: proxy.IPv4, Tracker: pb.tracker, Proxier: Backend{Proxier: signalProxier{pb.synced}},
		Node:          func() (desired.Node, bool) { return node, true },
		Compute:       desired.Options{MasqueradeBit: 14},
		MinSyncPeriod: minSync, SyncPeriod: time.Hour,
		AfterSync: func(*desired.State, model.Changes) { pb.done <- struct{}{} },
	})
	if err != nil {
		b.Fatal(err)
	}
	pb.syncer = s
	ctx, cancel := context.WithCancel(context.Background())
	pb.cancel = cancel
	pb.wg.Go(func() { s.Loop(ctx) })
	<-pb.synced // the first, full sync
	<-pb.done
	b.Cleanup(func() { cancel(); pb.wg.Wait() })
	return pb
}

// event moves Service i's slice to its other version, as the watcher
// hands a slice update to the tracker and asks for a sync.
func (pb *pathBench) event(i int) {
	old := pb.slices[i][pb.current[i]]
	pb.current[i] ^= 1
	if pb.tracker.OnEndpointSliceUpdate(old, pb.slices[i][pb.current[i]]) {
		pb.syncer.Request()
	}
}

// BenchmarkPartialPath10kx10: one endpoint change at a time, at 10k
// Services × 10 endpoints, minSyncPeriod 0 (a sync per change). ns/op is
// event → the sync done but the backend's work; ns-to-backend/op is
// event → Proxier.Sync called.
func BenchmarkPartialPath10kx10(b *testing.B) {
	pb := newPathBench(b, 10000, 0)
	var toBackend time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t0 := time.Now()
		pb.event(i % len(pb.slices))
		<-pb.synced
		toBackend += time.Since(t0)
		<-pb.done
		i++
	}
	b.ReportMetric(float64(toBackend.Nanoseconds())/float64(i), "ns-to-backend/op")
}

// BenchmarkBurstPath10kx10: bursts of 100 changes to distinct Services,
// with minSyncPeriod 1ms: how many syncs a burst takes and how long until
// all of it is programmed.
func BenchmarkBurstPath10kx10(b *testing.B) {
	const burst = 100
	pb := newPathBench(b, 10000, time.Millisecond)
	syncs, n := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		for range burst {
			pb.event(n % len(pb.slices))
			n++
		}
		// Done when a sync has taken the last event: nothing is pending.
		for {
			<-pb.synced
			<-pb.done
			syncs++
			if svcs, eps := pb.tracker.Pending(); svcs+eps == 0 {
				break
			}
		}
	}
	b.ReportMetric(float64(syncs)/float64(b.N), "syncs/burst")
}
