package watch

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// directRecorder records what a directStore delivers, in describe's words,
// and whether the old side of an update or delete was only a stub.
type directRecorder struct{ events []string }

func (r *directRecorder) deliver(old, cur any) {
	var o, c objectName
	stub := ""
	if old != nil {
		o = metaName{old.(*v1.Service)}
		if old.(*v1.Service).Spec.ClusterIP == "" {
			stub = " (stub)"
		}
	}
	if cur != nil {
		c = metaName{cur.(*v1.Service)}
	}
	r.events = append(r.events, describe(o, c)+stub)
}

func newTestDirectStore(r *directRecorder) *directStore {
	return newDirectStore("Service", keep, r.deliver, func(ns, name string) any {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	})
}

// metaName is an object as an objectName.
type metaName struct{ metav1.Object }

func (m metaName) Namespace() string { return m.GetNamespace() }
func (m metaName) Name() string      { return m.GetName() }

// keep is a transform that keeps the object as it is.
func keep(obj any) (any, error) { return obj, nil }

func TestDirectStoreRelistDeletesWhatIsGone(t *testing.T) {
	r := &directRecorder{}
	s := newTestDirectStore(r)
	a, b, c := testService("a", nil), testService("b", nil), testService("c", nil)
	if err := s.Replace([]any{a, b}, "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.synced:
	default:
		t.Fatal("not synced after the first Replace")
	}
	// The watch broke; meanwhile b was deleted and c created: the relist
	// must turn that into a delete of b.
	if err := s.Replace([]any{a, c}, "5"); err != nil {
		t.Fatal(err)
	}
	want := []string{"add ns/a", "add ns/b", "update ns/a (stub)", "add ns/c", "delete ns/b (stub)"}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events %q, want %q", r.events, want)
	}
}

func TestDirectStoreWatchEvents(t *testing.T) {
	r := &directRecorder{}
	s := newTestDirectStore(r)
	a := testService("a", nil)
	for _, step := range []func() error{
		func() error { return s.Replace(nil, "1") },
		func() error { return s.Add(a) },
		func() error { return s.Update(a) },
		func() error { return s.Delete(a) },
		func() error { return s.Update(a) }, // unknown again: an add
		func() error { return s.Resync() },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"add ns/a", "update ns/a (stub)", "delete ns/a", "add ns/a"}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events %q, want %q", r.events, want)
	}
	if len(s.keys) != 1 {
		t.Errorf("%d keys kept, want 1", len(s.keys))
	}
}
