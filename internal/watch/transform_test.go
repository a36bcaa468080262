package watch

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// The transform must not change what the model makes of an object: every
// field is filled at random (then the ones the parser validates are made
// mostly valid, so that most objects parse to something), and the model's
// result with the lean object must equal the one with the full object.

const transformRounds = 3000

func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.2).NumElements(1, 4)
}

func TestLeanServiceParsesTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	parsed := 0
	for i := 0; i < transformRounds; i++ {
		svc := &v1.Service{}
		filler(int64(i)).Fill(svc)
		plausibleService(r, svc)
		orig := svc.DeepCopy()
		lean, err := leanObject(svc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(svc, orig) {
			t.Fatalf("round %d: the transform changed its input", i)
		}
		for _, family := range proxy.Families {
			wantPorts, wantProblems := model.ParseService(orig, family)
			gotPorts, gotProblems := model.ParseService(lean.(*v1.Service), family)
			if !reflect.DeepEqual(gotPorts, wantPorts) || fmt.Sprint(gotProblems) != fmt.Sprint(wantProblems) {
				t.Fatalf("round %d %s: lean Service parses to\n%v %v\nwant\n%v %v", i, family, gotPorts, gotProblems, wantPorts, wantProblems)
			}
			parsed += len(wantPorts)
		}
	}
	if parsed < transformRounds {
		t.Errorf("only %d service ports parsed in %d rounds: the inputs are not plausible enough to test anything", parsed, transformRounds)
	}
}

func TestLeanSliceParsesTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	endpoints := 0
	for i := 0; i < transformRounds; i++ {
		s := &discoveryv1.EndpointSlice{}
		filler(int64(i)).Fill(s)
		plausibleSlice(r, s)
		orig := s.DeepCopy()
		lean, err := leanObject(s)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(s, orig) {
			t.Fatalf("round %d: the transform changed its input", i)
		}
		for _, family := range proxy.Families {
			want, wantChanges := commitSlice(family, orig)
			got, gotChanges := commitSlice(family, lean.(*discoveryv1.EndpointSlice))
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotChanges, wantChanges) {
				t.Fatalf("round %d %s: lean slice gives\n%+v\nwant\n%+v", i, family, got, want)
			}
			for _, eps := range want.Endpoints.All() {
				endpoints += len(eps)
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

func TestLeanObjectPassesOthersThrough(t *testing.T) {
	tomb := "not an object"
	if got, err := leanObject(tomb); err != nil || got != tomb {
		t.Errorf("leanObject(%q) = %v, %v", tomb, got, err)
	}
}

func TestLeanMetaDropsManagedFieldsKeepsIdentity(t *testing.T) {
	m := metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u", ResourceVersion: "7",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Labels:        map[string]string{"app": "x", discoveryv1.LabelServiceName: "a"},
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}}
	got := leanMeta(&m)
	want := metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u", ResourceVersion: "7",
		Labels: map[string]string{discoveryv1.LabelServiceName: "a"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("leanMeta = %+v, want %+v", got, want)
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
	svc.Annotations[model.SchedulerAnnotation] = pickOf(r, []string{"rr", " lc ", ""})
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
