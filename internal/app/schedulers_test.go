package app

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

func TestSchedulerWarnerWarnsOncePerServiceAndValue(t *testing.T) {
	var got []string
	w := newSchedulerWarner(func(svc proxy.ServiceName, value string) { got = append(got, svc.String()+"="+value) })
	port := func(svc, portName, sched string) *desired.ServicePort {
		return &desired.ServicePort{Name: proxy.ServicePortName{
			ServiceName: proxy.ServiceName{Namespace: "ns", Name: svc}, Port: portName, Protocol: proxy.TCP}, Scheduler: sched}
	}
	full := &desired.State{Services: map[proxy.ServicePortName]*desired.ServicePort{}}
	for _, sp := range []*desired.ServicePort{port("a", "http", "lc"), port("b", "http", "fastest"), port("b", "https", "fastest"), port("c", "", "")} {
		full.Services[sp.Name] = sp
	}
	w.observe(full, model.Changes{})
	w.observe(full, model.Changes{}) // a resync warns nothing new
	changed := port("b", "http", "quickest")
	partial := &desired.State{
		Services: map[proxy.ServicePortName]*desired.ServicePort{changed.Name: changed},
		Changed:  map[proxy.ServicePortName]struct{}{changed.Name: {}},
	}
	w.observe(partial, model.Changes{})
	want := []string{"ns/b=fastest", "ns/b=quickest"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("warnings = %v, want %v", got, want)
	}
}
