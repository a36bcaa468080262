package model

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// recordingCounter keeps what a Tracker told its EventCounter.
type recordingCounter struct {
	services        int
	servicesPending []int
	slices          int
	slicesPending   int
}

func (c *recordingCounter) ServiceEvent(pending int) {
	c.services++
	c.servicesPending = append(c.servicesPending, pending)
}

func (c *recordingCounter) EndpointSliceEvent(pending bool) {
	c.slices++
	if pending {
		c.slicesPending++
	}
}

// TestTrackerCountsEventsAsUpstream follows upstream's change trackers:
// every Service event counts (an ignored Service and an update that changes
// nothing too), with the number of Services now pending; a slice event
// counts when the slice is of the tracker's family and names its Service,
// and is pending unless it deletes a slice never taken. Counting happens
// at the event, not at Commit.
func TestTrackerCountsEventsAsUpstream(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	c := &recordingCounter{}
	tr.SetEventCounter(c)

	web := makeService("ns", "web", nil)
	tr.OnServiceUpdate(nil, web)
	tr.OnServiceUpdate(nil, makeService("ns", "db", nil))
	tr.OnServiceUpdate(web, makeService("ns", "web", func(s *v1.Service) { s.Labels = map[string]string{"a": "b"} }))
	tr.OnServiceUpdate(nil, makeService("ns", "ext", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName }))
	if c.services != 4 || c.servicesPending[1] != 2 {
		t.Fatalf("service events %d with pending %v; want 4, the second with 2 pending", c.services, c.servicesPending)
	}

	slice := makeSlice("ns", "web-1", "web", []string{"10.0.0.1"}, nil)
	tr.OnEndpointSliceUpdate(nil, slice)
	tr.OnEndpointSliceUpdate(slice, makeSlice("ns", "web-1", "web", []string{"10.0.0.2"}, nil))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "v6", "web", []string{"fd00::1"}, func(s *discoveryv1.EndpointSlice) {
		s.AddressType = discoveryv1.AddressTypeIPv6
	}))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "unnamed", "web", []string{"10.0.0.3"}, func(s *discoveryv1.EndpointSlice) {
		delete(s.Labels, discoveryv1.LabelServiceName)
	}))
	if c.slices != 2 || c.slicesPending != 2 {
		t.Fatalf("slice events %d (%d pending); want 2 (2): other family and unnamed slices do not count", c.slices, c.slicesPending)
	}
	tr.Commit()
	if c.services != 4 || c.slices != 2 {
		t.Fatalf("Commit counted events: %d services, %d slices", c.services, c.slices)
	}

	// The deletion of a slice never taken counts, with nothing pending;
	// a deletion known only by name (a relist) counts for a taken slice.
	tr.OnEndpointSliceUpdate(makeSlice("ns", "never", "web", []string{"10.0.0.9"}, nil), nil)
	stub := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1"}}
	tr.OnEndpointSliceUpdate(stub, nil)
	if c.slices != 4 || c.slicesPending != 3 {
		t.Fatalf("after deletions: %d slice events (%d pending), want 4 (3)", c.slices, c.slicesPending)
	}
}
