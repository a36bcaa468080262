package desired_test

import (
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// colorAnnotation is a test mode's extension annotation.
const colorAnnotation = "example.svcproxy.io/color"

// colors is a test mode's PortSettings: the color annotation when it is
// one of known, else default, with the refused value kept.
type colors struct {
	def   string
	known []string
	// got records the extensions each call was given.
	got []map[string]string
}

func (c *colors) PortSetting(ext map[string]string) *desired.PortSetting {
	c.got = append(c.got, ext)
	v, ok := ext[colorAnnotation]
	switch {
	case !ok:
		return &desired.PortSetting{Value: c.def}
	case v == c.known[0] || v == c.known[1]:
		return &desired.PortSetting{Value: v}
	}
	return &desired.PortSetting{Value: c.def, Refused: v}
}

func webService(annotations map[string]string) *v1.Service {
	return proxytest.MakeService("ns", "web", func(s *v1.Service) {
		s.Annotations = annotations
		s.Spec.ClusterIP = "172.30.0.10"
		s.Spec.ClusterIPs = []string{"172.30.0.10"}
		s.Spec.Ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}
	})
}

var webHTTP = proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: proxy.TCP}

// settingState computes the web Service with annotations under settings
// (nil: a mode without settings) and returns its port.
func settingState(t *testing.T, annotations map[string]string, settings desired.PortSettings) *desired.ServicePort {
	t.Helper()
	return computedPort(t, annotations, func(o *desired.Options) { o.PortSettings = settings })
}

// annotatedPort computes the web Service annotated key=value (none for
// ""), with the options opts sets, and returns its port.
func annotatedPort(t *testing.T, key, value string, opts func(*desired.Options)) *desired.ServicePort {
	t.Helper()
	var annotations map[string]string
	if value != "" {
		annotations = map[string]string{key: value}
	}
	return computedPort(t, annotations, opts)
}

// computedPort computes the web Service with annotations and the options
// opts sets, and returns its port.
func computedPort(t *testing.T, annotations map[string]string, opts func(*desired.Options)) *desired.ServicePort {
	t.Helper()
	c := proxytest.Case{Name: "web", Services: []*v1.Service{webService(annotations)}, Options: opts}
	sp, ok := proxytest.BuildState(t, c, proxy.IPv4).Services.Get(webHTTP)
	if !ok {
		t.Fatalf("service port %v missing from state", webHTTP)
	}
	return sp
}

// Compute hands the mode's PortSettings the Service's extension
// annotations (svcproxy.io's domain and its subdomains only, trimmed by
// model, blank ones left out) and keeps its decision, whatever it means;
// a mode without settings gets none.
func TestPortSettingDecidedInCompute(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		none        bool
		want        *desired.PortSetting
		wantExt     map[string]string
	}{
		{name: "known value, trimmed by model", annotations: map[string]string{colorAnnotation: " red "},
			want: &desired.PortSetting{Value: "red"}, wantExt: map[string]string{colorAnnotation: "red"}},
		{name: "no annotation", want: &desired.PortSetting{Value: "blue"}},
		{name: "refused value", annotations: map[string]string{colorAnnotation: "plaid"},
			want: &desired.PortSetting{Value: "blue", Refused: "plaid"}, wantExt: map[string]string{colorAnnotation: "plaid"}},
		{name: "other domains, blank values and what model decides itself are not extensions",
			annotations: map[string]string{"example.com/color": "red", "svcproxy.io.example.com/color": "red",
				"notsvcproxy.io/color": "red", "svcproxy.io/blank": " ", "svcproxy.io/shape": "round",
				model.ExternalBalancingAnnotation: "maglev"},
			want: &desired.PortSetting{Value: "blue"}, wantExt: map[string]string{"svcproxy.io/shape": "round"}},
		{name: "mode without settings", annotations: map[string]string{colorAnnotation: "red"}, none: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settings := &colors{def: "blue", known: []string{"red", "blue"}}
			var ps desired.PortSettings = settings
			if tc.none {
				ps = nil
			}
			got := settingState(t, tc.annotations, ps).Setting
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("Setting = %+v, want %+v", got, tc.want)
			}
			if tc.none {
				return
			}
			if len(settings.got) != 1 || !maps.Equal(settings.got[0], tc.wantExt) {
				t.Errorf("PortSetting was given %v, want one call with %v", settings.got, tc.wantExt)
			}
		})
	}
}

// A change of the setting is a change of the port; two Computes' equal
// settings are equal, whatever their pointers.
func TestPortSettingInEqual(t *testing.T) {
	settings := &colors{def: "blue", known: []string{"red", "blue"}}
	sp := settingState(t, nil, settings)
	if again := settingState(t, nil, settings); !sp.Equal(again) {
		t.Error("equal settings of two Computes compare unequal")
	}
	other := *sp
	other.Setting = &desired.PortSetting{Value: "red"}
	if sp.Equal(&other) {
		t.Error("ports differing only in the setting's value compare equal")
	}
	other.Setting = &desired.PortSetting{Value: "blue", Refused: "plaid"}
	if sp.Equal(&other) {
		t.Error("ports differing only in the refused value compare equal")
	}
}

// An annotation edited on a live Service reaches the setting through an
// incremental Compute: the tracker sees the port change, Compute decides
// it again and says it changed.
func TestPortSettingFollowsAnnotation(t *testing.T) {
	settings := &colors{def: "blue", known: []string{"red", "blue"}}
	opts := proxytest.StandardOptions(proxy.IPv4)
	opts.PortSettings = settings
	node := proxytest.NodeOf(proxytest.MakeNode(proxytest.NodeName, nil))
	tracker := model.NewTracker(proxy.IPv4)
	before := webService(nil)
	tracker.OnServiceUpdate(nil, before)
	tracker.OnServicesSynced()
	tracker.OnEndpointSlicesSynced()
	snap, changes := tracker.Commit()
	prev := desired.Compute(nil, snap, changes, node, opts)

	tracker.OnServiceUpdate(before, webService(map[string]string{colorAnnotation: "red"}))
	snap, changes = tracker.Commit()
	st := desired.Compute(prev, snap, changes, node, opts)
	if _, ok := st.Changed[webHTTP]; !ok {
		t.Errorf("Changed = %v, want %v: an annotation edit must resync the port", st.Changed, webHTTP)
	}
	if sp := st.Service(webHTTP); sp == nil || sp.Setting == nil || sp.Setting.Value != "red" {
		t.Errorf("after the edit the port's setting is %+v, want red", sp)
	}
}
