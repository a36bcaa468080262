package ipvs

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// The scheduler annotation is IPVS mode's own: model keeps it with the
// Service's other extension annotations, Compute asks Scheduling, and the
// port carries the decision: a name the kernel ships is used, another one
// is refused for the default and kept for the Event, no annotation is the
// default, shared between ports.
func TestSchedulingResolvedInCompute(t *testing.T) {
	scheduling := NewScheduling("wlc")
	for _, tc := range []struct {
		name       string
		annotation string
		want       desired.PortSetting
	}{
		{"known name, trimmed by model", " lc ", desired.PortSetting{Value: "lc"}},
		{"no annotation", "", desired.PortSetting{Value: "wlc"}},
		{"blank annotation", "  ", desired.PortSetting{Value: "wlc"}},
		{"unknown name", "fastest", desired.PortSetting{Value: "wlc", Refused: "fastest"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := proxytest.MakeService("ns", "web", func(s *v1.Service) {
				if tc.annotation != "" {
					s.Annotations = map[string]string{SchedulerAnnotation: tc.annotation}
				}
				s.Spec.ClusterIP = "172.30.0.10"
				s.Spec.ClusterIPs = []string{"172.30.0.10"}
				s.Spec.Ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}
			})
			c := proxytest.Case{Name: "scheduler", Services: []*v1.Service{svc},
				Options: func(o *desired.Options) { o.PortSettings = scheduling }}
			sp := proxytest.BuildState(t, c, proxy.IPv4).Services.All()
			for _, got := range sp {
				if got.Setting == nil || *got.Setting != tc.want {
					t.Errorf("Setting = %+v, want %+v", got.Setting, tc.want)
				}
				if tc.want.Refused == "" && tc.want.Value == "wlc" && got.Setting != scheduling.fallback {
					t.Error("a port on the default does not share the default's setting")
				}
				return
			}
			t.Fatal("the Service has no port in the State")
		})
	}
}
