package app

import (
	"fmt"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// sched is a mode's decision for an annotation value: kept when it is
// known, else refused (the default, rr here, applies).
func sched(value string) *desired.PortSetting {
	switch value {
	case "":
		return &desired.PortSetting{Value: "rr"}
	case "rr", "lc":
		return &desired.PortSetting{Value: value}
	}
	return &desired.PortSetting{Value: "rr", Refused: value}
}

func TestSettingWarnerWarnsOncePerServiceAndValue(t *testing.T) {
	var got []string
	w := newSettingWarner(func(svc proxy.ServiceName, value string) { got = append(got, svc.String()+"="+value) })
	port := func(svc, portName, value string) *desired.ServicePort {
		return &desired.ServicePort{Name: proxy.ServicePortName{
			ServiceName: proxy.ServiceName{Namespace: "ns", Name: svc}, Port: portName, Protocol: proxy.TCP}, Setting: sched(value)}
	}
	full := &desired.State{Services: model.PortMap[*desired.ServicePort]{}}
	for _, sp := range []*desired.ServicePort{port("a", "http", "lc"), port("b", "http", "fastest"), port("b", "https", "fastest"), port("c", "", "")} {
		full.Services = full.Services.With(sp.Name, sp)
	}
	w.observe(full, model.Changes{})
	w.observe(full, model.Changes{}) // a resync warns nothing new
	changed := port("b", "http", "quickest")
	partial := &desired.State{
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{changed.Name: changed}),
		Changed:  map[proxy.ServicePortName]struct{}{changed.Name: {}},
	}
	w.observe(partial, model.Changes{})
	want := []string{"ns/b=fastest", "ns/b=quickest"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("warnings = %v, want %v", got, want)
	}
}

// TestSettingWarnerForgetsGoneServices: the warner's memory must follow
// the Services that exist, not every Service ever seen.
func TestSettingWarnerForgetsGoneServices(t *testing.T) {
	warnings := 0
	w := newSettingWarner(func(proxy.ServiceName, string) { warnings++ })
	state := &desired.State{Services: model.PortMap[*desired.ServicePort]{}}
	var names []proxy.ServicePortName
	for i := range 100 {
		sp := &desired.ServicePort{Name: proxy.ServicePortName{
			ServiceName: proxy.ServiceName{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}, Port: "p", Protocol: proxy.TCP}, Setting: sched("bogus")}
		state.Services = state.Services.With(sp.Name, sp)
		names = append(names, sp.Name)
	}
	w.observe(state, model.Changes{})
	if warnings != 100 || len(w.warned) != 100 {
		t.Fatalf("warnings=%d remembered=%d, want 100 and 100", warnings, len(w.warned))
	}

	// Partial syncs delete half the Services and fix the annotation of a quarter.
	partial := &desired.State{Services: model.PortMap[*desired.ServicePort]{}, Changed: map[proxy.ServicePortName]struct{}{}}
	for i, name := range names {
		switch {
		case i < 50: // deleted
		case i < 75:
			partial.Services = partial.Services.With(name, &desired.ServicePort{Name: name, Setting: sched("rr")})
		default:
			partial.Services = partial.Services.With(name, state.Service(name))
			continue
		}
		partial.Changed[name] = struct{}{}
	}
	w.observe(partial, model.Changes{})
	if len(w.warned) != 25 {
		t.Errorf("after partial sync remembered %d Services, want the 25 still invalid", len(w.warned))
	}

	// A full sync with none of them keeps nothing, and warns nothing new.
	w.observe(&desired.State{Services: model.PortMap[*desired.ServicePort]{}}, model.Changes{})
	if len(w.warned) != 0 || warnings != 100 {
		t.Errorf("after full sync: remembered %d, warnings %d; want 0 and 100", len(w.warned), warnings)
	}
}
