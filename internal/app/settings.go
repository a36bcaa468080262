package app

import (
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// settingWarner reports, once per Service and value, an extension
// annotation that the mode's own per-port decision refused
// (desired.PortSetting.Refused, as IPVS mode refuses a scheduler the
// kernel does not ship); the Warning event, worded by the mode's row,
// tells the Service's owner why. It reads the decision and checks nothing
// itself.
type settingWarner struct {
	warn func(svc proxy.ServiceName, value string)

	mu sync.Mutex
	// warned holds the Services that have an invalid value now, and only
	// those: an entry goes when its Service or the bad value does, so the
	// map does not grow with every Service the node ever saw.
	warned map[proxy.ServiceName]string
}

func newSettingWarner(warn func(proxy.ServiceName, string)) *settingWarner {
	return &settingWarner{warn: warn, warned: map[proxy.ServiceName]string{}}
}

// observe fits syncer.Options.AfterSync: it looks at the changed ports, or
// all of them after a full sync, which also rebuilds warned from scratch.
func (w *settingWarner) observe(state *desired.State, _ model.Changes) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if state.Changed == nil {
		before := w.warned
		w.warned = make(map[proxy.ServiceName]string)
		for _, sp := range state.Services.All() {
			w.check(before, sp)
		}
		return
	}
	for name := range state.Changed {
		if sp := state.Service(name); sp != nil {
			w.check(w.warned, sp)
			continue
		}
		// The port is gone. Forgetting its Service is exact when the whole
		// Service went; if other ports remain with the same bad value, their
		// next change warns once more, which is harmless.
		delete(w.warned, name.ServiceName)
	}
}

// check warns about sp's refused setting unless before or w.warned already
// holds that value for its Service, and records the outcome in w.warned.
func (w *settingWarner) check(before map[proxy.ServiceName]string, sp *desired.ServicePort) {
	svc := sp.Name.ServiceName
	if sp.Setting == nil || sp.Setting.Refused == "" {
		delete(w.warned, svc)
		return
	}
	value := sp.Setting.Refused
	// w.warned: another port of the Service, already seen in this sync.
	if before[svc] != value && w.warned[svc] != value {
		w.warn(svc, value)
	}
	w.warned[svc] = value
}

// refusedSetting records the Warning event for observe, as the mode's row
// words it; every node of the mode refuses the annotation alike, so they
// post one Event.
func (e *eventSink) refusedSetting(svc proxy.ServiceName, w backends.Warning) {
	ref := v1.ObjectReference{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}
	e.shared.post(ref, w.Reason, "SyncProxyRules", w.Message)
}

// chainAfterSync runs every hook after a sync, in order.
func chainAfterSync(hooks ...func(*desired.State, model.Changes)) func(*desired.State, model.Changes) {
	return func(state *desired.State, changes model.Changes) {
		for _, h := range hooks {
			h(state, changes)
		}
	}
}
