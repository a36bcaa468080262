package app

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// schedulerWarner reports, once per Service and value, an
// ipvs.svcproxy.io/scheduler annotation that desired ignored because it
// names no kernel scheduler (desired.Scheduler.Ignored: the node's default
// applies); the Warning event tells the Service's owner why. It reads the
// decision and checks nothing itself.
type schedulerWarner struct {
	warn func(svc proxy.ServiceName, value string)

	mu sync.Mutex
	// warned holds the Services that have an invalid value now, and only
	// those: an entry goes when its Service or the bad value does, so the
	// map does not grow with every Service the node ever saw.
	warned map[proxy.ServiceName]string
}

func newSchedulerWarner(warn func(proxy.ServiceName, string)) *schedulerWarner {
	return &schedulerWarner{warn: warn, warned: map[proxy.ServiceName]string{}}
}

// observe fits syncer.Options.AfterSync: it looks at the changed ports, or
// all of them after a full sync, which also rebuilds warned from scratch.
func (w *schedulerWarner) observe(state *desired.State, _ model.Changes) {
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

// check warns about sp's scheduler unless before or w.warned already holds
// that value for its Service, and records the outcome in w.warned.
func (w *schedulerWarner) check(before map[proxy.ServiceName]string, sp *desired.ServicePort) {
	svc := sp.Name.ServiceName
	if sp.Scheduler == nil || sp.Scheduler.Ignored == "" {
		delete(w.warned, svc)
		return
	}
	value := sp.Scheduler.Ignored
	// w.warned: another port of the Service, already seen in this sync.
	if before[svc] != value && w.warned[svc] != value {
		w.warn(svc, value)
	}
	w.warned[svc] = value
}

// invalidScheduler records the Warning event for observe; every IPVS
// node ignores the annotation alike, so they post one Event.
func (e *eventSink) invalidScheduler(svc proxy.ServiceName, value string) {
	ref := v1.ObjectReference{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}
	e.shared.post(ref, "InvalidIPVSScheduler", "SyncProxyRules", fmt.Sprintf(
		"annotation %s=%q names no IPVS scheduler (one of %v); the node's default is used",
		model.SchedulerAnnotation, value, kipvs.Schedulers))
}

// chainAfterSync runs every hook after a sync, in order.
func chainAfterSync(hooks ...func(*desired.State, model.Changes)) func(*desired.State, model.Changes) {
	return func(state *desired.State, changes model.Changes) {
		for _, h := range hooks {
			h(state, changes)
		}
	}
}
