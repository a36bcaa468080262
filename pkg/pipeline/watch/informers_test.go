package watch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
)

// recorder is a Tracker that records what it is told. Its parses hold only
// the name; it notes a parse it is handed that it did not make ("foreign").
type recorder struct {
	mu             sync.Mutex
	needSync       bool
	services       []string // "add ns/name", "update ns/name", "delete ns/name"
	slices         []string
	servicesSynced bool
	slicesSynced   bool
	made           map[any]bool // the parses it made
}

// objectName is what describe reads of an object or a parse.
type objectName interface {
	Namespace() string
	Name() string
}

func describe(old, cur objectName) string {
	switch {
	case old == nil:
		return "add " + cur.Namespace() + "/" + cur.Name()
	case cur == nil:
		return "delete " + old.Namespace() + "/" + old.Name()
	}
	return "update " + cur.Namespace() + "/" + cur.Name()
}

// own records p as one of the recorder's parses.
func (r *recorder) own(p any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.made == nil {
		r.made = map[any]bool{}
	}
	r.made[p] = true
}

func (r *recorder) ParseService(svc *v1.Service) *model.ParsedService {
	p := model.ServiceStub(svc.Namespace, svc.Name)
	r.own(p)
	return p
}

func (r *recorder) ParseEndpointSlice(s *discoveryv1.EndpointSlice) *model.ParsedEndpointSlice {
	p := model.EndpointSliceStub(s.Namespace, s.Name)
	r.own(p)
	return p
}

// record notes one event; a nil old or cur must be passed as a nil
// interface.
func (r *recorder) record(events *[]string, old, cur objectName, curParse any) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	event := describe(old, cur)
	if cur != nil && !r.made[curParse] {
		event += " (foreign)"
	}
	*events = append(*events, event)
	return r.needSync
}

func (r *recorder) OnParsedServiceUpdate(old, cur *model.ParsedService) bool {
	o, c := nameOf(old), nameOf(cur)
	return r.record(&r.services, o, c, cur)
}

func (r *recorder) OnParsedEndpointSliceUpdate(old, cur *model.ParsedEndpointSlice) bool {
	o, c := nameOf(old), nameOf(cur)
	return r.record(&r.slices, o, c, cur)
}

// nameOf is p as an objectName; nil for a nil p.
func nameOf[P interface {
	*model.ParsedService | *model.ParsedEndpointSlice
	objectName
}](p P) objectName {
	if p == nil {
		return nil
	}
	return p
}

func (r *recorder) OnServicesSynced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.servicesSynced = true
}

func (r *recorder) OnEndpointSlicesSynced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slicesSynced = true
}

func (r *recorder) snapshot() (services, endpointSlices []string, synced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.services), slices.Clone(r.slices), r.servicesSynced && r.slicesSynced
}

// eventually retries cond for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func labelled(ls map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "ns", Labels: ls}
}

func testService(name string, ls map[string]string) *v1.Service {
	meta := labelled(ls)
	meta.Name = name
	return &v1.Service{ObjectMeta: meta, Spec: v1.ServiceSpec{ClusterIP: "172.30.0.1"}}
}

func testSlice(name string, ls map[string]string) *discoveryv1.EndpointSlice {
	meta := labelled(ls)
	meta.Name = name
	return &discoveryv1.EndpointSlice{ObjectMeta: meta, AddressType: discoveryv1.AddressTypeIPv4}
}

func TestLabelSelector(t *testing.T) {
	cases := []struct {
		proxyName string
		labels    map[string]string
		want      bool
	}{
		{"", nil, true},
		{"", map[string]string{"app": "x"}, true},
		{"", map[string]string{LabelServiceProxyName: "other"}, false},
		{"", map[string]string{LabelHeadless: ""}, false},
		{"mine", nil, false},
		{"mine", map[string]string{LabelServiceProxyName: "mine"}, true},
		{"mine", map[string]string{LabelServiceProxyName: "other"}, false},
		{"mine", map[string]string{LabelServiceProxyName: "mine", LabelHeadless: ""}, false},
	}
	for _, tc := range cases {
		sel, err := LabelSelector(tc.proxyName)
		if err != nil {
			t.Fatalf("LabelSelector(%q): %v", tc.proxyName, err)
		}
		if got := sel.Matches(labels.Set(tc.labels)); got != tc.want {
			t.Errorf("proxy name %q, labels %v: match %v, want %v (selector %s)", tc.proxyName, tc.labels, got, tc.want, sel)
		}
	}
	if _, err := LabelSelector("not a valid label value!"); err == nil {
		t.Errorf("an invalid proxy name must be an error")
	}
}

func TestInformersFilterAndFanOut(t *testing.T) {
	for _, tc := range []struct {
		proxyName string
		want      string
	}{
		{"", "plain"},
		{"mine", "claimed"},
	} {
		t.Run("proxyName="+tc.proxyName, func(t *testing.T) {
			mine := map[string]string{LabelServiceProxyName: "mine"}
			headless := map[string]string{LabelHeadless: ""}
			client := fake.NewClientset(
				testService("plain", nil), testService("claimed", mine), testService("headless", headless),
				testSlice("plain", nil), testSlice("claimed", mine), testSlice("headless", headless),
			)
			v4, v6 := &recorder{needSync: true}, &recorder{needSync: false}
			var syncs4, syncs6 int
			var mu sync.Mutex
			w, err := NewInformers(client, Options{ServiceProxyName: tc.proxyName},
				Target{Tracker: v4, SyncNeeded: func() { mu.Lock(); syncs4++; mu.Unlock() }},
				Target{Tracker: v6, SyncNeeded: func() { mu.Lock(); syncs6++; mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w.Start(ctx)

			want := []string{"add ns/" + tc.want}
			for _, r := range []*recorder{v4, v6} {
				eventually(t, "initial sync", func() bool { _, _, synced := r.snapshot(); return synced })
				svcs, slcs, _ := r.snapshot()
				if !slices.Equal(svcs, want) || !slices.Equal(slcs, want) {
					t.Fatalf("services %v, slices %v; want %v", svcs, slcs, want)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			// v4 asks for a sync per event (2) and per synced list (2); v6
			// says no event needs one, so only the two synced lists count.
			if syncs4 != 4 || syncs6 != 2 {
				t.Fatalf("sync requests v4=%d v6=%d, want 4 and 2", syncs4, syncs6)
			}
		})
	}
}

func TestInformersDeliverUpdatesAndDeletes(t *testing.T) {
	client := fake.NewClientset()
	waitWatch := watchOpened(client, "services")
	r := &recorder{}
	ctx := startSynced(t, client, r, r)
	waitWatch(t)

	services := client.CoreV1().Services("ns")
	svc, err := services.Create(ctx, testService("web", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc = svc.DeepCopy()
	svc.Spec.ClusterIP = "172.30.0.9"
	if _, err := services.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := services.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"add ns/web", "update ns/web", "delete ns/web"}
	eventually(t, "service events", func() bool { s, _, _ := r.snapshot(); return len(s) == 3 })
	if got, _, _ := r.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestTombstonesAreUnwrapped(t *testing.T) {
	r := &recorder{needSync: true}
	syncs := 0
	w, err := NewInformers(fake.NewClientset(), Options{}, Target{Tracker: r, SyncNeeded: func() { syncs++ }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.svcStore.Delete(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: testService("web", nil)}); err != nil {
		t.Fatal(err)
	}
	if err := w.sliceStr.Delete(cache.DeletedFinalStateUnknown{Key: "ns/web-1", Obj: testSlice("web-1", nil)}); err != nil {
		t.Fatal(err)
	}
	// Garbage is refused or ignored, not passed on and not a crash.
	if err := w.svcStore.Delete(cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: "not a service"}); err == nil {
		t.Error("a tombstone of garbage was accepted")
	}
	w.onService(testService("raw", nil), nil) // not parsed
	w.onSlice(42, nil)

	svcs, slcs, _ := r.snapshot()
	if !slices.Equal(svcs, []string{"delete ns/web"}) || !slices.Equal(slcs, []string{"delete ns/web-1"}) {
		t.Fatalf("services %v, slices %v", svcs, slcs)
	}
	if syncs != 2 {
		t.Fatalf("%d sync requests, want 2", syncs)
	}
}

// slowRecorder takes its time with every Service, as a tracker does under
// load, and notes how many it had been given when told the list synced.
type slowRecorder struct {
	recorder
	seenAtSync int
}

func (r *slowRecorder) OnParsedServiceUpdate(old, cur *model.ParsedService) bool {
	time.Sleep(200 * time.Microsecond)
	return r.recorder.OnParsedServiceUpdate(old, cur)
}

func (r *slowRecorder) OnServicesSynced() {
	r.mu.Lock()
	r.seenAtSync = len(r.services)
	r.mu.Unlock()
	r.recorder.OnServicesSynced()
}

// TestSyncedOnlyAfterHandlersSawTheList: the informer's cache is complete
// long before a slow handler has been given every object; the synced
// notification (which releases the first sync) must wait for the handler.
func TestSyncedOnlyAfterHandlersSawTheList(t *testing.T) {
	const n = 1000
	var objs []runtime.Object
	for i := range n {
		objs = append(objs, testService(fmt.Sprintf("svc-%d", i), nil))
	}
	r := &slowRecorder{}
	startSynced(t, fake.NewClientset(objs...), r, &r.recorder)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seenAtSync != n {
		t.Fatalf("told the Services synced after %d of %d Services", r.seenAtSync, n)
	}
}

// startSynced starts informers for one tracker and waits until rec (the
// tracker's record) was told both lists synced. The informers stop with
// the test.
func startSynced(t *testing.T, client *fake.Clientset, tracker Tracker, rec *recorder) context.Context {
	t.Helper()
	w, err := NewInformers(client, Options{}, Target{Tracker: tracker})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.Start(ctx)
	eventually(t, "initial sync", func() bool { _, _, synced := rec.snapshot(); return synced })
	return ctx
}
