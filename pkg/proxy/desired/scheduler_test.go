package desired_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
	"github.com/svcproxy/svcproxy/pkg/proxy/proxytest"
)

// The IPVS scheduler annotation is parsed once in model and reaches every
// port of the Service in the State; changing it is a change of the port.
func TestSchedulerAnnotationReachesState(t *testing.T) {
	svc := proxytest.MakeService("ns", "web", func(s *v1.Service) {
		s.Annotations = map[string]string{model.SchedulerAnnotation: " lc "}
		s.Spec.ClusterIP = "172.30.0.10"
		s.Spec.ClusterIPs = []string{"172.30.0.10"}
		s.Spec.Ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}
	})
	state := proxytest.BuildState(t, proxytest.Case{Name: "scheduler", Services: []*v1.Service{svc}}, proxy.IPv4)
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: proxy.TCP}
	sp, ok := state.Services[name]
	if !ok {
		t.Fatalf("service port %v missing from state", name)
	}
	if sp.Scheduler != "lc" {
		t.Errorf("Scheduler = %q, want %q", sp.Scheduler, "lc")
	}
	other := *sp
	other.Scheduler = "rr"
	if sp.Equal(&other) {
		t.Error("ports differing only in scheduler compare equal")
	}
}
