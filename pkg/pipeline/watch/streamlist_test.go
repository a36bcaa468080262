package watch

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// BenchmarkInitialWatchList delivers the initial streaming list of 10k
// Services and their 10k EndpointSlices of 10 endpoints each, shaped as the
// API server writes them (managedFields, last-applied annotation, a
// targetRef per endpoint), through the real reflectors and directStores to
// an IPv4 tracker, until both lists are delivered and the tracker synced.
// The objects are built once: decoding is not measured.
func BenchmarkInitialWatchList(b *testing.B) {
	const n = 10000
	services, slices := make([]runtime.Object, n), make([]runtime.Object, n)
	for i := range n {
		services[i], slices[i] = benchService(i), benchSlice(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU(b)
	for range b.N {
		tracker := model.NewTracker(proxy.IPv4)
		w := newInformers(streamedList(services, &v1.Service{}), streamedList(slices, &discoveryv1.EndpointSlice{}),
			[]Target{{Tracker: tracker}})
		ctx, cancel := context.WithCancel(context.Background())
		w.Start(ctx)
		if !w.svcStore.waitSynced(ctx) || !w.sliceStr.waitSynced(ctx) {
			b.Fatal("not synced")
		}
		for !tracker.Synced() { // afterSync runs right after the delivery
			goruntime.Gosched()
		}
		if s, e := tracker.Pending(); s != n || e != n {
			b.Fatalf("%d Services and %d endpoint sets pending, want %d", s, e, n)
		}
		cancel()
	}
	b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
	b.StopTimer()
	atEnd, synced := heldAtListEnd(b, services, slices)
	b.ReportMetric(float64(atEnd), "listend-B")
	b.ReportMetric(float64(synced), "synced-B")
}

// heldAtListEnd streams services and slices as the benchmark does, and
// returns how much more heap is live than before the start once every
// object was consumed but before the lists' end bookmarks (what the
// reflectors' temporary stores hold), and once both lists were delivered
// (the tracker's model).
func heldAtListEnd(b *testing.B, services, slices []runtime.Object) (atEnd, synced uint64) {
	time.Sleep(100 * time.Millisecond) // the benchmark's reflectors stop
	tracker := model.NewTracker(proxy.IPv4)
	end := make(chan struct{})
	svcLW, svcW := streamedListUntil(services, &v1.Service{}, end)
	sliceLW, sliceW := streamedListUntil(slices, &discoveryv1.EndpointSlice{}, end)
	w := newInformers(svcLW, sliceLW, []Target{{Tracker: tracker}})
	before := liveHeap()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.Start(ctx)
	for !consumed(svcW) || !consumed(sliceW) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // the last object is stored after it is received
	atEnd = liveHeap() - before
	close(end)
	if !w.svcStore.waitSynced(ctx) || !w.sliceStr.waitSynced(ctx) {
		b.Fatal("not synced")
	}
	synced = liveHeap() - before
	goruntime.KeepAlive(tracker)
	return atEnd, synced
}

// consumed reports whether the watch was opened and all its events read.
func consumed(w *atomic.Pointer[watch.FakeWatcher]) bool {
	fw := w.Load()
	return fw != nil && len(fw.ResultChan()) == 0
}

func liveHeap() uint64 {
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return m.HeapAlloc
}

// processCPU returns the CPU time the process used so far (user and
// system, every goroutine and the garbage collector): on a loaded machine
// it varies far less than the wall time.
func processCPU(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// streamedList is a ListerWatcher whose watch with sendInitialEvents
// streams objs and the bookmark that ends the initial events, then stays
// open; bookmark is an empty object of the listed type.
func streamedList(objs []runtime.Object, bookmark metav1.Object) cache.ListerWatcher {
	lw, _ := streamedListUntil(objs, bookmark, nil)
	return lw
}

// streamedListUntil is streamedList with the bookmark sent once end is
// closed (at once for a nil end); it also returns the streaming watch, set
// once opened.
func streamedListUntil(objs []runtime.Object, bookmark metav1.Object, end <-chan struct{}) (cache.ListerWatcher, *atomic.Pointer[watch.FakeWatcher]) {
	opened := &atomic.Pointer[watch.FakeWatcher]{}
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return nil, fmt.Errorf("listed instead of a streaming list")
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFakeWithOptions(watch.FakeOptions{ChannelSize: len(objs) + 1})
			if o.SendInitialEvents == nil || !*o.SendInitialEvents {
				return w, nil
			}
			for _, obj := range objs {
				w.Add(obj)
			}
			bookmark.SetResourceVersion("2")
			bookmark.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
			opened.Store(w)
			if end == nil {
				w.Action(watch.Bookmark, bookmark.(runtime.Object))
			} else {
				go func() { <-end; w.Action(watch.Bookmark, bookmark.(runtime.Object)) }()
			}
			return w, nil
		},
	}, opened
}

// apiMeta is the metadata of an object as the API server returns it.
func apiMeta(name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: "bench", UID: types.UID("0f0e0d0c-" + name), ResourceVersion: "1",
		Labels:        labels,
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Service"}`},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:ports":{}}}`)}},
	}
}

func benchService(i int) *v1.Service {
	name := fmt.Sprintf("svc-%d", i)
	return &v1.Service{
		ObjectMeta: apiMeta(name, map[string]string{"app": name}),
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  fmt.Sprintf("172.30.%d.%d", i/256, i%256),
			ClusterIPs: []string{fmt.Sprintf("172.30.%d.%d", i/256, i%256)},
			Ports:      []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
			Selector:   map[string]string{"app": name},
		},
	}
}

func benchSlice(i int) *discoveryv1.EndpointSlice {
	name := fmt.Sprintf("svc-%d", i)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  apiMeta(name+"-abcde", map[string]string{discoveryv1.LabelServiceName: name, "app": name}),
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for e := range 10 {
		node := fmt.Sprintf("node-%d", (i*10+e)%100)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i/256%256, i%256, e+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   &node,
			Zone:       ptr.To("zone-a"),
			TargetRef:  &v1.ObjectReference{Kind: "Pod", Namespace: "bench", Name: fmt.Sprintf("%s-pod-%d", name, e), UID: "0a0b0c0d"},
		})
	}
	return s
}
