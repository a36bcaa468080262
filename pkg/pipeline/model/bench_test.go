package model

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// loadedTracker returns a tracker holding n committed Services with 10
// endpoints each.
func loadedTracker(b *testing.B, n int) *Tracker {
	b.Helper()
	tr := NewTracker(proxy.IPv4)
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("172.30.%d.%d", i/256, i%256)
		tr.OnServiceUpdate(nil, makeService("ns", name, func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
		}))
		eps := make([]string, 10)
		for j := range eps {
			eps[j] = fmt.Sprintf("10.%d.%d.%d", i/256, i%256, j+1)
		}
		tr.OnEndpointSliceUpdate(nil, makeSlice("ns", name+"-1", name, eps, nil))
	}
	tr.Commit()
	return tr
}

// BenchmarkCommitOneEndpointChange measures one endpoint flapping at 10k
// services: the event plus the Commit that publishes it.
func BenchmarkCommitOneEndpointChange(b *testing.B) {
	tr := loadedTracker(b, 10000)
	notReady := func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = ptrTo(false) }
	eps := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5",
		"10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9", "10.0.0.10"}
	states := [2]*discoveryv1.EndpointSlice{
		makeSlice("ns", "svc-0-1", "svc-0", eps, nil),
		makeSlice("ns", "svc-0-1", "svc-0", eps, notReady),
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		tr.OnEndpointSliceUpdate(states[i%2], states[(i+1)%2])
		if _, ch := tr.Commit(); len(ch.Changed) != 1 {
			b.Fatalf("changed %d service ports, want 1", len(ch.Changed))
		}
	}
}

// BenchmarkCommitOnly isolates Commit from event handling.
func BenchmarkCommitOnly(b *testing.B) {
	tr := loadedTracker(b, 10000)
	svcs := [2]*v1.Service{
		makeService("ns", "svc-0", func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.0", []string{"172.30.0.0"} }),
		makeService("ns", "svc-0", func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.0", []string{"172.30.0.0"}
			s.Spec.Ports[0].Port = 81
		}),
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		tr.OnServiceUpdate(svcs[i%2], svcs[(i+1)%2])
		b.StartTimer()
		tr.Commit()
	}
}
