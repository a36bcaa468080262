package watch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/randfill"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Parsing through the reflector's transform and the directStore must give
// the model that the tracker makes of the object itself: every field is
// filled at random (then the ones the parser validates are made mostly
// valid, so that most objects parse to something), and the committed
// snapshots of dual-stack trackers fed both ways must be equal. Half the
// rounds go the way of the streamed list (transform, then Replace), half
// the way of a watch event (Add of the decoded object).

const transformRounds = 3000

func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.2).NumElements(1, 4)
}

// viaWatch feeds obj to new trackers of both families through the
// directStore of the Informers (store picks it), the way a list (asList)
// or a watch event brings it, and returns the trackers.
func viaWatch(t *testing.T, obj any, asList bool, store func(*Informers) *directStore) []*model.Tracker {
	t.Helper()
	var trackers []*model.Tracker
	var targets []Target
	for _, family := range proxy.Families {
		tr := model.NewTracker(family)
		trackers, targets = append(trackers, tr), append(targets, Target{Tracker: tr})
	}
	w := newInformers(streamedList(nil, &v1.Service{}), streamedList(nil, &discoveryv1.EndpointSlice{}), targets)
	s := store(w)
	var err error
	if asList {
		var parsed any
		if parsed, err = s.Transformer()(obj); err == nil {
			err = s.Replace([]any{parsed}, "1")
		}
	} else {
		err = s.Add(obj)
	}
	if err != nil {
		t.Fatal(err)
	}
	return trackers
}

func TestParsedServiceTakesTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	parsed := 0
	for i := 0; i < transformRounds; i++ {
		svc := &v1.Service{}
		filler(int64(i)).Fill(svc)
		plausibleService(r, svc)
		orig := svc.DeepCopy()
		got := viaWatch(t, svc, i%2 == 0, func(w *Informers) *directStore { return w.svcStore })
		if !reflect.DeepEqual(svc, orig) {
			t.Fatalf("round %d: the transform changed its input", i)
		}
		for k, family := range proxy.Families {
			want := model.NewTracker(family)
			want.OnServiceUpdate(nil, orig)
			wantSnap, wantChanges := want.Commit()
			gotSnap, gotChanges := got[k].Commit()
			if !reflect.DeepEqual(gotSnap, wantSnap) || !reflect.DeepEqual(gotChanges, wantChanges) {
				t.Fatalf("round %d %s: through the watch\n%+v\nwant\n%+v", i, family, gotSnap, wantSnap)
			}
			parsed += wantSnap.Services.Len()
		}
	}
	if parsed < transformRounds {
		t.Errorf("only %d service ports parsed in %d rounds: the inputs are not plausible enough to test anything", parsed, transformRounds)
	}
}

func TestParsedSliceTakesTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	endpoints := 0
	for i := 0; i < transformRounds; i++ {
		s := &discoveryv1.EndpointSlice{}
		filler(int64(i)).Fill(s)
		plausibleSlice(r, s)
		orig := s.DeepCopy()
		got := viaWatch(t, s, i%2 == 0, func(w *Informers) *directStore { return w.sliceStr })
		if !reflect.DeepEqual(s, orig) {
			t.Fatalf("round %d: the transform changed its input", i)
		}
		for k, family := range proxy.Families {
			want, wantChanges := commitSlice(family, orig)
			gotSnap, gotChanges := got[k].Commit()
			if !reflect.DeepEqual(gotSnap, want) || !reflect.DeepEqual(gotChanges, wantChanges) {
				t.Fatalf("round %d %s: through the watch\n%+v\nwant\n%+v", i, family, gotSnap, want)
			}
			for _, eps := range want.Endpoints.All() {
				endpoints += eps.Len()
			}
		}
	}
	if endpoints < transformRounds/4 {
		t.Errorf("only %d endpoints parsed in %d rounds: the inputs are not plausible enough", endpoints, transformRounds)
	}
}

func commitSlice(family proxy.IPFamily, s *discoveryv1.EndpointSlice) (*model.Snapshot, model.Changes) {
	tr := model.NewTracker(family)
	tr.OnEndpointSliceUpdate(nil, s)
	return tr.Commit()
}

func TestTransformPassesOthersThrough(t *testing.T) {
	w := newInformers(streamedList(nil, &v1.Service{}), streamedList(nil, &discoveryv1.EndpointSlice{}), nil)
	tomb := "not an object"
	for _, transform := range []func(any) (any, error){w.parseService, w.parseSlice} {
		if got, err := transform(tomb); err != nil || got != tomb {
			t.Errorf("transform(%q) = %v, %v", tomb, got, err)
		}
	}
}

// TestParsedKeepsOnlyIdentity: what the temporary store holds is keyed and
// versioned by the reflector and the directStore through meta.Accessor,
// and client-go's consistency check needs a runtime.Object; the decoded
// object's metadata is not kept.
func TestParsedKeepsOnlyIdentity(t *testing.T) {
	tr := model.NewTracker(proxy.IPv4)
	w := newInformers(streamedList(nil, &v1.Service{}), streamedList(nil, &discoveryv1.EndpointSlice{}), []Target{{Tracker: tr}})
	svc := testService("a", map[string]string{"app": "x"})
	svc.UID, svc.ResourceVersion = "u", "7"
	svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	svc.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
	out, err := w.parseService(svc)
	if err != nil {
		t.Fatal(err)
	}
	obj, ok := out.(runtime.Object)
	if !ok {
		t.Fatalf("the transform returned a %T, not a runtime.Object", out)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	want := metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u", ResourceVersion: "7"}
	if got := out.(*parsed[*model.ParsedService]).ObjectMeta; !reflect.DeepEqual(got, want) {
		t.Errorf("kept %+v, want %+v", got, want)
	}
	if key, err := cache.MetaNamespaceKeyFunc(obj); err != nil || key != "ns/a" || m.GetResourceVersion() != "7" {
		t.Errorf("key %q (%v), resourceVersion %q", key, err, m.GetResourceVersion())
	}
	if cp := obj.DeepCopyObject(); !reflect.DeepEqual(cp, obj) {
		t.Errorf("DeepCopyObject = %+v, want %+v", cp, obj)
	}
	if again, _ := w.parseService(out); again != out {
		t.Error("a parsed object was parsed again")
	}
}

// countingRecorder counts the Services it parsed.
type countingRecorder struct {
	recorder
	parsed atomic.Int32
}

func (r *countingRecorder) ParseService(svc *v1.Service) *model.ParsedService {
	r.parsed.Add(1)
	return r.recorder.ParseService(svc)
}

// TestStreamedListIsParsedAsItArrives: through the real reflector, each
// Service of the initial streaming list is parsed as it arrives, and the
// tracker takes the parses once the list has ended, each as an add, then
// is told the list synced.
func TestStreamedListIsParsedAsItArrives(t *testing.T) {
	const n = 50
	var objs []runtime.Object
	for i := range n {
		objs = append(objs, testService(fmt.Sprintf("svc-%d", i), nil))
	}
	end := make(chan struct{})
	svcLW, _ := streamedListUntil(objs, &v1.Service{}, end)
	r := &countingRecorder{}
	w := newInformers(svcLW, streamedList(nil, &discoveryv1.EndpointSlice{}),
		[]Target{{Tracker: r}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.Start(ctx)
	eventually(t, "every Service parsed", func() bool { return r.parsed.Load() == n })
	if svcs, _, synced := r.snapshot(); len(svcs) != 0 || synced {
		t.Fatalf("before the list ended: %d Services taken, synced %v", len(svcs), synced)
	}
	close(end)
	eventually(t, "the list delivered", func() bool { _, _, synced := r.snapshot(); return synced })
	svcs, _, _ := r.snapshot()
	slices.Sort(svcs)
	if len(svcs) != n || r.parsed.Load() != n {
		t.Fatalf("took %d Services, parsed %d; want %d, each parsed once", len(svcs), r.parsed.Load(), n)
	}
	for i, e := range svcs {
		if !strings.HasPrefix(e, "add ns/svc-") || (i > 0 && e == svcs[i-1]) {
			t.Fatalf("events %q, want one add per Service", svcs)
		}
	}
}

var (
	serviceTypes = []v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer, v1.ServiceTypeExternalName}
	protocols    = []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP, "", "ICMP"}
)

func pickOf[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// randIP is mostly a valid IPv4 or IPv6 address, sometimes garbage.
func randIP(r *rand.Rand) string {
	switch r.IntN(5) {
	case 0:
		return fmt.Sprintf("fd00::%x", r.IntN(65536))
	case 1:
		return "not-an-ip"
	}
	return fmt.Sprintf("10.%d.%d.%d", r.IntN(256), r.IntN(256), r.IntN(256))
}

func plausibleService(r *rand.Rand, svc *v1.Service) {
	svc.Spec.Type = pickOf(r, serviceTypes)
	svc.Spec.ClusterIP = randIP(r)
	svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP, randIP(r)}[:1+r.IntN(2)]
	svc.Spec.ExternalIPs = []string{randIP(r)}
	svc.Spec.LoadBalancerSourceRanges = []string{randIP(r) + "/24", " 10.0.0.0/8 ", "bad"}[:r.IntN(4)]
	svc.Spec.SessionAffinity = pickOf(r, []v1.ServiceAffinity{v1.ServiceAffinityNone, v1.ServiceAffinityClientIP})
	svc.Spec.ExternalTrafficPolicy = pickOf(r, []v1.ServiceExternalTrafficPolicy{v1.ServiceExternalTrafficPolicyLocal, v1.ServiceExternalTrafficPolicyCluster})
	svc.Spec.HealthCheckNodePort = int32(r.IntN(70000))
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		p.Protocol = pickOf(r, protocols)
		p.Port, p.NodePort = int32(r.IntN(66000)), int32(r.IntN(66000))
		p.Name = fmt.Sprint("p", r.IntN(3))
	}
	for i := range svc.Status.LoadBalancer.Ingress {
		svc.Status.LoadBalancer.Ingress[i].IP = randIP(r)
	}
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	// An extension annotation (IPVS mode's scheduler), kept by model.
	svc.Annotations["ipvs."+model.ExtensionDomain+"/scheduler"] = pickOf(r, []string{"rr", " lc ", ""})
	svc.Annotations[model.ExternalBalancingAnnotation] = pickOf(r, []string{"maglev", " Random ", "ring-hash", ""})
	svc.Annotations[v1.AnnotationTopologyMode] = pickOf(r, []string{"Auto", "auto", "x"})
	svc.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
}

func plausibleSlice(r *rand.Rand, s *discoveryv1.EndpointSlice) {
	s.AddressType = pickOf(r, []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN})
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if r.IntN(10) > 0 {
		s.Labels[discoveryv1.LabelServiceName] = "svc"
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	trigger := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	s.Annotations[v1.EndpointsLastChangeTriggerTime] = pickOf(r, []string{trigger, "garbage"})
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Protocol != nil {
			*p.Protocol = pickOf(r, protocols)
		}
		if p.Port != nil {
			*p.Port = int32(r.IntN(66000))
		}
		if p.Name != nil {
			*p.Name = fmt.Sprint("p", r.IntN(3))
		}
	}
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		for k := range e.Addresses {
			e.Addresses[k] = randIP(r)
		}
	}
}
