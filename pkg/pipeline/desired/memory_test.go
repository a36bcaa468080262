package desired

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// BenchmarkLiveHeap10kx10 reports what the model and the desired State hold
// at 10k Services × 10 endpoints, each taken through a Tracker as the
// watcher hands them over, then one full Compute: model-MB is the heap in
// use after a GC once the tracker committed (the API objects dropped),
// desired-MB what the State adds, live-MB both; take-MB/take-allocs and
// compute-MB/compute-allocs what taking the objects (parse included) and
// the Compute allocated. "bare" endpoints carry an address only, as make
// bench-e2e's seed; "located" ones a node name (100 nodes), a zone and a
// targetRef, as the API server returns them.
//
// With -liveheap-profile=FILE it writes a heap profile (inuse_space: what
// holds the memory) once the State is computed; run with -memprofilerate=1
// for exact figures.
func BenchmarkLiveHeap10kx10(b *testing.B) {
	for _, located := range []bool{false, true} {
		b.Run(map[bool]string{false: "bare", true: "located"}[located], func(b *testing.B) {
			for b.Loop() {
				measureLiveHeap(b, 10000, 10, located)
			}
		})
	}
}

var flagLiveHeapProfile = flag.String("liveheap-profile", "", "BenchmarkLiveHeap10kx10 writes a heap profile to this file")

func measureLiveHeap(b *testing.B, services, endpoints int, located bool) {
	before := memStats()
	svcs, slices := apiWorld(services, endpoints, located)
	built := memStats()
	tr := model.NewTracker(proxy.IPv4)
	for i := range svcs {
		tr.OnServiceUpdate(nil, svcs[i])
		tr.OnEndpointSliceUpdate(nil, slices[i])
	}
	snap, _ := tr.Commit()
	taken := memStats()
	svcs, slices = nil, nil
	modelHeap := memStats().HeapAlloc - before.HeapAlloc

	computeStart := memStats()
	state := Compute(nil, snap, model.Changes{}, apiWorldNode, v4Options())
	computed := memStats()
	if state.Services.Len() != services {
		b.Fatalf("%d service ports, want %d", state.Services.Len(), services)
	}
	live := computed.HeapAlloc - before.HeapAlloc
	b.ReportMetric(float64(modelHeap)/1e6, "model-MB")
	b.ReportMetric(float64(live-modelHeap)/1e6, "desired-MB")
	b.ReportMetric(float64(live)/1e6, "live-MB")
	b.ReportMetric(float64(taken.TotalAlloc-built.TotalAlloc)/1e6, "take-MB")
	b.ReportMetric(float64(taken.Mallocs-built.Mallocs), "take-allocs")
	b.ReportMetric(float64(computed.TotalAlloc-computeStart.TotalAlloc)/1e6, "compute-MB")
	b.ReportMetric(float64(computed.Mallocs-computeStart.Mallocs), "compute-allocs")
	if *flagLiveHeapProfile != "" {
		writeHeapProfile(b, *flagLiveHeapProfile)
	}
	runtime.KeepAlive(tr)
	runtime.KeepAlive(state)
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// memStats returns the memory statistics after a collection.
func memStats() runtime.MemStats {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// apiWorldNode is one of apiWorld's 100 nodes.
var apiWorldNode = Node{Name: "node-7", Zone: "zone-b", IPs: addrs("192.168.0.7")}

// apiWorld returns n ClusterIP Services with one TCP port and, for each, one
// EndpointSlice of e ready endpoints, shaped as the API server returns them;
// each string is its own allocation, as decoding makes them.
func apiWorld(n, e int, located bool) ([]*v1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*v1.Service, n)
	slices := make([]*discoveryv1.EndpointSlice, n)
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("172.30.%d.%d", i/256, i%256)
		svcs[i] = &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name, UID: types.UID("uid-" + name)},
			Spec: v1.ServiceSpec{
				Type: v1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
			},
		}
		slices[i] = apiSlice(i, name, e, located)
	}
	return svcs, slices
}

func apiSlice(i int, svc string, e int, located bool) *discoveryv1.EndpointSlice {
	ready, port, portName, proto := true, int32(8080), "http", v1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: svc + "-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
	}
	for j := range e {
		ep := discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i/256%256, i%256, j+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		}
		if located {
			node, zone := fmt.Sprintf("node-%d", (i*e+j)%100), fmt.Sprintf("zone-%c", 'a'+(i*e+j)%3)
			ep.NodeName, ep.Zone = &node, &zone
			ep.TargetRef = &v1.ObjectReference{Kind: "Pod", Namespace: "bench", Name: fmt.Sprintf("%s-pod-%d", svc, j)}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// TestServicePortSize keeps a State's ServicePort in the 320-byte malloc
// size class (one per service port and family): a field that pushes it to
// the next class (352) costs every port, so it goes in a word the small
// fields share, or behind a pointer as DSR does.
func TestServicePortSize(t *testing.T) {
	if got := unsafe.Sizeof(ServicePort{}); got > 320 {
		t.Fatalf("ServicePort takes %d bytes, want at most 320 (the next size class is 352)", got)
	}
}
