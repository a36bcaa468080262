package desired_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
	"github.com/svcproxy/svcproxy/pkg/proxy/proxytest"
)

// schedulerState computes a Service whose annotation asks for scheduler
// value, with scheduling (nil: not IPVS mode), and returns its port.
func schedulerState(t *testing.T, value string, scheduling *desired.IPVSScheduling) *desired.ServicePort {
	t.Helper()
	return annotatedPort(t, model.SchedulerAnnotation, value, func(o *desired.Options) { o.Scheduling = scheduling })
}

// annotatedPort computes ns/web, one port http 80/TCP, annotated key=value
// (none for ""), with the options opts sets, and returns its port.
func annotatedPort(t *testing.T, key, value string, opts func(*desired.Options)) *desired.ServicePort {
	t.Helper()
	svc := proxytest.MakeService("ns", "web", func(s *v1.Service) {
		if value != "" {
			s.Annotations = map[string]string{key: value}
		}
		s.Spec.ClusterIP = "172.30.0.10"
		s.Spec.ClusterIPs = []string{"172.30.0.10"}
		s.Spec.Ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}
	})
	c := proxytest.Case{Name: key, Services: []*v1.Service{svc}, Options: opts}
	state := proxytest.BuildState(t, c, proxy.IPv4)
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: proxy.TCP}
	sp, ok := state.Services.Get(name)
	if !ok {
		t.Fatalf("service port %v missing from state", name)
	}
	return sp
}

// The IPVS scheduler annotation is parsed once in model and resolved once in
// desired: a known name is used, an unknown one falls back to the default
// and is kept for the Event, no annotation is the default; outside IPVS
// mode nothing is decided. The backend and the app only read the decision.
func TestSchedulerResolvedInDesired(t *testing.T) {
	ipvs := &desired.IPVSScheduling{Default: "wlc", Known: []string{"rr", "wlc", "lc"}}
	for _, tc := range []struct {
		name       string
		annotation string
		scheduling *desired.IPVSScheduling
		want       *desired.Scheduler
	}{
		{"known name, trimmed by model", " lc ", ipvs, &desired.Scheduler{Name: "lc"}},
		{"no annotation", "", ipvs, &desired.Scheduler{Name: "wlc"}},
		{"unknown name", "fastest", ipvs, &desired.Scheduler{Name: "wlc", Ignored: "fastest"}},
		{"not IPVS mode", "lc", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := schedulerState(t, tc.annotation, tc.scheduling).Scheduler
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("Scheduler = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A change of the decided scheduler is a change of the port; two Computes'
// equal decisions are equal, whatever their pointers.
func TestSchedulerInEqual(t *testing.T) {
	ipvs := &desired.IPVSScheduling{Default: "rr", Known: []string{"rr", "lc"}}
	sp := schedulerState(t, "", ipvs)
	if again := schedulerState(t, "", ipvs); !sp.Equal(again) {
		t.Error("equal decisions of two Computes compare unequal")
	}
	other := *sp
	other.Scheduler = &desired.Scheduler{Name: "lc"}
	if sp.Equal(&other) {
		t.Error("ports differing only in scheduler compare equal")
	}
	other.Scheduler = &desired.Scheduler{Name: "rr", Ignored: "bogus"}
	if sp.Equal(&other) {
		t.Error("ports differing only in the ignored annotation compare equal")
	}
}
