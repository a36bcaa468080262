package app

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/kipvs"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// schedulerWarner reports, once per Service and value, an
// ipvs.svcproxy.io/scheduler annotation naming no kernel scheduler. The IPVS
// backend ignores such a value (the node's default applies); the Warning
// event tells the Service's owner why.
type schedulerWarner struct {
	warn func(svc proxy.ServiceName, value string)

	mu     sync.Mutex
	warned map[proxy.ServiceName]string
}

func newSchedulerWarner(warn func(proxy.ServiceName, string)) *schedulerWarner {
	return &schedulerWarner{warn: warn, warned: map[proxy.ServiceName]string{}}
}

// observe fits syncer.Options.AfterSync: it looks at the changed ports, or
// all of them after a full sync.
func (w *schedulerWarner) observe(state *desired.State, _ model.Changes) {
	w.mu.Lock()
	defer w.mu.Unlock()
	check := func(sp *desired.ServicePort) {
		if sp == nil || sp.Scheduler == "" || slices.Contains(kipvs.Schedulers, sp.Scheduler) {
			return
		}
		if w.warned[sp.Name.ServiceName] == sp.Scheduler {
			return
		}
		w.warned[sp.Name.ServiceName] = sp.Scheduler
		w.warn(sp.Name.ServiceName, sp.Scheduler)
	}
	if state.Changed == nil {
		for _, sp := range state.Services {
			check(sp)
		}
		return
	}
	for name := range state.Changed {
		check(state.Services[name])
	}
}

// invalidScheduler records the Warning event for observe.
func (e *eventSink) invalidScheduler(svc proxy.ServiceName, value string) {
	ref := &v1.ObjectReference{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}
	e.recorder.Eventf(ref, nil, v1.EventTypeWarning, "InvalidIPVSScheduler", "SyncProxyRules",
		"annotation %s=%q names no IPVS scheduler (one of %v); the node's default is used",
		model.SchedulerAnnotation, value, kipvs.Schedulers)
}

// chainAfterSync runs every hook after a sync, in order.
func chainAfterSync(hooks ...func(*desired.State, model.Changes)) func(*desired.State, model.Changes) {
	return func(state *desired.State, changes model.Changes) {
		for _, h := range hooks {
			h(state, changes)
		}
	}
}
