package model

import (
	"errors"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// sliceKey identifies an EndpointSlice object.
type sliceKey struct{ namespace, name string }

// Tracker folds Service and EndpointSlice events for one IP family into
// pending per-Service changes, and turns them into a Snapshot on Commit.
//
// Everything is computed per Service at event time, against what the last
// Commit published, so a change that is undone before the next Commit
// (A→B→A) leaves nothing pending, and Commit itself only touches the
// Services with pending changes. A Tracker is safe for concurrent use.
type Tracker struct {
	family proxy.IPFamily
	// start filters out trigger times older than the tracker: the initial
	// list replays old objects whose latency is not ours to measure.
	start time.Time

	mu             sync.Mutex
	servicesSynced bool
	slicesSynced   bool

	// What the last Commit published.
	snapshot *Snapshot
	// services holds, per Service, what the last Commit published of it and
	// every EndpointSlice seen for it.
	services map[proxy.ServiceName]*serviceRecord
	// sliceOwner names the Service each slice currently belongs to; it is
	// in the slice's namespace.
	sliceOwner map[sliceKey]string
	// names shares the strings that many endpoints repeat.
	names *interner

	// Services whose current state differs from the committed one. A present
	// but empty set means "removed".
	pendingPorts map[proxy.ServiceName]portSet
	pendingEps   map[proxy.ServiceName]endpointSet
	triggerTimes map[proxy.ServiceName][]time.Time

	// report, if set, is told what parsing ignored (SetProblemReporter).
	report ProblemReporter
	// count, if set, is told of every event taken (SetEventCounter).
	count EventCounter
}

// EventCounter is told of each event a Tracker takes, as it takes it, the
// way upstream's change trackers count them for
// kubeproxy_sync_proxy_rules_{service,endpoint}_changes_{total,pending}:
// per event and per tracker (a dual-stack Service event counts twice),
// never per sync.
type EventCounter interface {
	// ServiceEvent is one Service event; pending is how many Services of
	// this tracker now differ from the last commit.
	ServiceEvent(pending int)
	// EndpointSliceEvent is one event of an EndpointSlice of this family
	// that names its Service; pending is false when it left nothing to do
	// (the deletion of a slice never taken).
	EndpointSliceEvent(pending bool)
}

// SetEventCounter makes the tracker tell c of every event it takes. Call
// it before the first event.
func (t *Tracker) SetEventCounter(c EventCounter) { t.count = c }

// ProblemReporter is told, for an object just parsed, what parts of it were
// ignored or overridden: each problem is a *Problem. kind is "Service" or
// "EndpointSlice".
type ProblemReporter func(kind, namespace, name string, problems []error)

// SetProblemReporter makes the tracker tell r about the problems of every
// object it parses (besides logging them). Call it before the first event.
func (t *Tracker) SetProblemReporter(r ProblemReporter) { t.report = r }

// NewTracker returns an empty Tracker for family.
func NewTracker(family proxy.IPFamily) *Tracker {
	return &Tracker{
		family:       family,
		start:        time.Now(),
		snapshot:     &Snapshot{Family: family},
		services:     map[proxy.ServiceName]*serviceRecord{},
		sliceOwner:   map[sliceKey]string{},
		names:        newInterner(),
		pendingPorts: map[proxy.ServiceName]portSet{},
		pendingEps:   map[proxy.ServiceName]endpointSet{},
		triggerTimes: map[proxy.ServiceName][]time.Time{},
	}
}

// OnParsedServiceUpdate records an add (old nil), update, or delete (new
// nil) of a Service this tracker parsed (new) or a stub (old). It returns
// true when the Service now differs from the last commit.
func (t *Tracker) OnParsedServiceUpdate(old, new *ParsedService) bool {
	obj := new
	if obj == nil {
		obj = old
	}
	if obj == nil {
		return false
	}
	name := obj.name
	var ports []*ServicePort
	if new != nil {
		ports = new.ports
		t.problems("Service", name.Namespace, name.Name, new.problems)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	changed := t.setServicePorts(name, ports)
	if t.count != nil {
		t.count.ServiceEvent(len(t.pendingPorts))
	}
	return changed
}

// setServicePorts records ports, which it takes over, as name's.
func (t *Tracker) setServicePorts(name proxy.ServiceName, ports []*ServicePort) bool {
	committed := t.services[name].committedPorts()
	set := sortPorts(ports)
	for i, sp := range set {
		if old := committed.get(sp.Name); sp.Equal(old) {
			set[i] = old // keep the published pointer for unchanged ports
		}
	}
	if portSetsEqual(set, committed) {
		delete(t.pendingPorts, name)
		return false
	}
	t.pendingPorts[name] = set
	return true
}

func portSetsEqual(a, b portSet) bool {
	return slices.EqualFunc(a, b, (*ServicePort).Equal)
}

// OnParsedEndpointSliceUpdate records an add (old nil), update, or delete
// (new nil) of an EndpointSlice this tracker parsed (new; old may be a
// stub). Slices of the other family, and FQDN slices, are ignored. It
// returns true when the endpoints of the slice's Service now differ from
// the last commit.
func (t *Tracker) OnParsedEndpointSliceUpdate(old, new *ParsedEndpointSlice) bool {
	obj := new
	if obj == nil {
		obj = old
	}
	if obj == nil {
		return false
	}
	key := obj.key
	if obj.family != t.family && !t.ownsSlice(key) {
		return false
	}
	var parsed *sliceEndpoints
	if new != nil && new.family == t.family {
		parsed = new.endpoints
		if new.err != nil {
			klog.InfoS("Ignoring invalid EndpointSlice", "endpointSlice", klog.KRef(key.namespace, key.name), "err", new.err)
		}
		t.problems("EndpointSlice", key.namespace, key.name, new.problems)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	ownerName, owned := t.sliceOwner[key]
	owner := proxy.ServiceName{Namespace: key.namespace, Name: ownerName}
	t.countSliceEvent(obj, new != nil && parsed == nil, parsed != nil || owned)
	changed := false
	// A slice that is deleted, became invalid, or moved to another Service
	// no longer counts for the Service it belonged to.
	if owned && (parsed == nil || ownerName != parsed.serviceName) {
		delete(t.sliceOwner, key)
		r := t.services[owner]
		r.slices = r.slices.remove(key.name)
		changed = t.refreshEndpoints(owner, r, time.Time{}, new == nil)
		t.dropIfEmpty(owner, r)
	}
	if parsed != nil {
		svc := proxy.ServiceName{Namespace: key.namespace, Name: parsed.serviceName}
		r := t.record(svc)
		r.slices = r.slices.set(key.name, parsed)
		t.sliceOwner[key] = parsed.serviceName
		changed = t.refreshEndpoints(svc, r, parsed.triggerTime, false) || changed
	}
	return changed
}

// countSliceEvent tells the counter of a slice event. Upstream cannot file
// a slice without its Service's name, so it counts neither such a slice
// nor its deletion; a deletion may carry only the name (a relist found it
// gone), which counts when the slice was taken.
func (t *Tracker) countSliceEvent(obj *ParsedEndpointSlice, unnamed, pending bool) {
	if t.count == nil || unnamed || (!pending && !obj.named) {
		return
	}
	t.count.EndpointSliceEvent(pending)
}

// ownsSlice reports whether the slice counts for one of our Services. The
// API makes addressType immutable, but a slice whose family changes anyway
// must stop counting rather than linger.
func (t *Tracker) ownsSlice(key sliceKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.sliceOwner[key]
	return ok
}

// refreshEndpoints recomputes svc's endpoints from its slices (r) and
// records them as pending if they differ from the committed ones.
func (t *Tracker) refreshEndpoints(svc proxy.ServiceName, r *serviceRecord, trigger time.Time, deleted bool) bool {
	merged := mergeSlices(r.slices)
	committed := r.eps
	same := len(merged) == len(committed)
	for i, pe := range merged {
		if old, ok := committed.get(pe.key); ok && pe.eps.Equal(old) {
			// Keep the published list for unchanged ports. merged may be
			// a slice's own set: replacing a list by an equal one keeps
			// that slice's endpoints what they were, and the new copy
			// becomes garbage instead of being held twice.
			merged[i].eps = old
		} else {
			same = false
		}
	}
	if same {
		delete(t.pendingEps, svc)
		delete(t.triggerTimes, svc)
		return false
	}
	t.pendingEps[svc] = merged
	switch {
	case deleted:
		// A deletion's trigger time is the time of the last update, not of
		// the deletion, so it would mismeasure; upstream drops them too.
		delete(t.triggerTimes, svc)
	case !trigger.IsZero() && trigger.After(t.start):
		t.triggerTimes[svc] = append(t.triggerTimes[svc], trigger)
	}
	return true
}

// serviceRecord is what a Tracker holds of one Service between events: what
// the last Commit published of it and every EndpointSlice seen for it. One
// record in one map, rather than three maps keyed by the Service: an entry
// keyed by a ServiceName costs about 100 bytes.
type serviceRecord struct {
	ports  portSet
	eps    endpointSet
	slices sliceList
}

// committedPorts returns the ports the last Commit published; none for a
// nil record.
func (r *serviceRecord) committedPorts() portSet {
	if r == nil {
		return nil
	}
	return r.ports
}

// record returns svc's record, adding an empty one if it has none.
func (t *Tracker) record(svc proxy.ServiceName) *serviceRecord {
	r := t.services[svc]
	if r == nil {
		r = &serviceRecord{}
		t.services[svc] = r
	}
	return r
}

// dropIfEmpty forgets svc once nothing of it is published or seen.
func (t *Tracker) dropIfEmpty(svc proxy.ServiceName, r *serviceRecord) {
	if len(r.ports) == 0 && len(r.eps) == 0 && len(r.slices) == 0 {
		delete(t.services, svc)
	}
}

// OnServicesSynced records that the initial list of Services was delivered.
func (t *Tracker) OnServicesSynced() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.servicesSynced = true
}

// OnEndpointSlicesSynced records that the initial list of EndpointSlices was
// delivered.
func (t *Tracker) OnEndpointSlicesSynced() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.slicesSynced = true
}

// Synced reports whether both initial lists were delivered, so a sync would
// not program a partial view.
func (t *Tracker) Synced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.servicesSynced && t.slicesSynced
}

// Pending returns how many Services have a pending Service change and how
// many have a pending endpoints change.
func (t *Tracker) Pending() (services, endpoints int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pendingPorts), len(t.pendingEps)
}

func (t *Tracker) problems(kind, namespace, name string, problems []error) {
	if len(problems) == 0 {
		return
	}
	var own []error
	for _, err := range problems {
		klog.InfoS("Ignoring invalid part of object", "kind", kind, "object", namespace+"/"+name, "ipFamily", t.family, "err", err)
		var p *Problem
		if errors.As(err, &p) && p.Service != "" {
			if t.report != nil {
				t.report("Service", namespace, p.Service, []error{err})
			}
			continue
		}
		own = append(own, err)
	}
	if t.report != nil && len(own) > 0 {
		t.report(kind, namespace, name, own)
	}
}
