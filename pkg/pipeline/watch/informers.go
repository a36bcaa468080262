// Package watch turns API server events into calls on the model trackers
// and watches this node's own Node object. It never touches the kernel.
package watch

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
)

// Labels kube-proxy selects Services and EndpointSlices by.
const (
	// LabelServiceProxyName claims a Service for an alternative proxy.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless is set by the EndpointSlice controller on the slices of
	// headless Services.
	LabelHeadless = v1.IsHeadlessService
)

// Tracker is what the watcher feeds; model.Tracker implements it. The
// watcher has each object parsed by the tracker that takes it (Parse*) as
// soon as it is decoded (transform.go), and hands the parse back to it
// (OnParsed*). Each OnParsed* method returns true when a sync is needed.
// old is nil for an add; for an update or a delete it may be a stub
// (model.ServiceStub, model.EndpointSliceStub): no earlier version of the
// object is kept.
type Tracker interface {
	ParseService(*v1.Service) *model.ParsedService
	ParseEndpointSlice(*discoveryv1.EndpointSlice) *model.ParsedEndpointSlice
	OnParsedServiceUpdate(old, new *model.ParsedService) bool
	OnParsedEndpointSliceUpdate(old, new *model.ParsedEndpointSlice) bool
	OnServicesSynced()
	OnEndpointSlicesSynced()
}

// Target is one IP family's tracker and the function that asks its syncer
// for a sync.
type Target struct {
	Tracker    Tracker
	SyncNeeded func()
}

// Options configure the Service and EndpointSlice informers.
type Options struct {
	// ResyncPeriod is configSyncPeriod; 0 disables resyncs.
	ResyncPeriod time.Duration
	// ServiceProxyName, when set, selects the objects labelled with it
	// instead of the unlabelled ones (an extension; kube-proxy has none).
	ServiceProxyName string
	// ContinuePages, when set, reads the pages of a Service or
	// EndpointSlice list after its first: the client without its rate
	// limiter (pagedlist.go). Nil means the client.
	ContinuePages kubernetes.Interface
	// Reconnect is how a list or watch that did not reach the API server
	// is retried; the zero value means ReconnectBackoff.
	Reconnect wait.Backoff
	// ListSized, when set, is told once per kind how large the initial
	// Service and EndpointSlice lists are, from their first pages
	// (listsize.go), while the rest of them arrive.
	ListSized func(ListSize)
}

// LabelSelector returns the selector kube-proxy uses for Services and
// EndpointSlices: no service-proxy-name label (or, with serviceProxyName,
// that name) and no headless label.
func LabelSelector(serviceProxyName string) (labels.Selector, error) {
	proxyName, err := labels.NewRequirement(LabelServiceProxyName, selection.DoesNotExist, nil)
	if serviceProxyName != "" {
		proxyName, err = labels.NewRequirement(LabelServiceProxyName, selection.Equals, []string{serviceProxyName})
	}
	if err != nil {
		return nil, fmt.Errorf("invalid service proxy name %q: %w", serviceProxyName, err)
	}
	notHeadless, err := labels.NewRequirement(LabelHeadless, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("building headless requirement: %w", err)
	}
	return labels.NewSelector().Add(*proxyName, *notHeadless), nil
}

// Informers watches Services and EndpointSlices and fans every event out to
// all targets (one per IP family). Despite the name it keeps no informer
// cache: a reflector per resource writes into a directStore (direct.go).
type Informers struct {
	services, slices   *cache.Reflector
	svcStore, sliceStr *directStore
	targets            []Target
}

// NewInformers builds the label-filtered reflectors. Nothing runs until
// Start. opts.ResyncPeriod is not used: a resync would hand the trackers
// objects they already hold.
func NewInformers(client kubernetes.Interface, opts Options, targets ...Target) (*Informers, error) {
	selector, err := LabelSelector(opts.ServiceProxyName)
	if err != nil {
		return nil, err
	}
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }
	backoff := opts.Reconnect
	if backoff == (wait.Backoff{}) {
		backoff = ReconnectBackoff
	}
	w := &Informers{targets: targets}
	// Listed in pages, each parsed as it arrives (pagedlist.go).
	more := opts.ContinuePages
	if more == nil {
		more = client
	}
	svcLW := newPagedList(client.CoreV1().Services(metav1.NamespaceAll), more.CoreV1().Services(metav1.NamespaceAll),
		tweak, w.parseService)
	svcLW.raw = newRawPages(client.CoreV1().RESTClient(), more.CoreV1().RESTClient(), "services", "ServiceList",
		decodeItem[v1.Service])
	sliceLW := newPagedList(client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll),
		more.DiscoveryV1().EndpointSlices(metav1.NamespaceAll), tweak, w.parseSlice)
	sliceLW.raw = newRawPages(client.DiscoveryV1().RESTClient(), more.DiscoveryV1().RESTClient(), "endpointslices",
		"EndpointSliceList", decodeItem[discoveryv1.EndpointSlice])
	if opts.ListSized != nil {
		svcLW.sampler = &listSampler{kind: "Service", measure: servicePorts, sized: opts.ListSized,
			count: countObjects(more.CoreV1().Services(metav1.NamespaceAll))}
		sliceLW.sampler = &listSampler{kind: "EndpointSlice", measure: endpointPorts, sized: opts.ListSized,
			count: countObjects(more.DiscoveryV1().EndpointSlices(metav1.NamespaceAll))}
	}
	w.init(newReconnecting(svcLW, svcLW, "services", backoff),
		newReconnecting(sliceLW, sliceLW, "endpointslices", backoff))
	return w, nil
}

// newInformers builds the reflectors over the given lists and watches.
func newInformers(services, slices cache.ListerWatcher, targets []Target) *Informers {
	w := &Informers{targets: targets}
	w.init(services, slices)
	return w
}

func (w *Informers) init(services, slices cache.ListerWatcher) {
	w.svcStore = newDirectStore("Service", w.parseService, w.onService, w.serviceStub)
	w.sliceStr = newDirectStore("EndpointSlice", w.parseSlice, w.onSlice, w.sliceStub)
	logger := listedLogger(klog.Background())
	w.services = cache.NewReflectorWithOptions(services, &v1.Service{},
		w.svcStore, cache.ReflectorOptions{Name: "services", TypeDescription: "*v1.Service", Logger: logger})
	w.slices = cache.NewReflectorWithOptions(slices, &discoveryv1.EndpointSlice{},
		w.sliceStr, cache.ReflectorOptions{Name: "endpointslices", TypeDescription: "*v1.EndpointSlice", Logger: logger})
}

// Start runs the reflectors until ctx is done. Once a resource's initial
// list has been given to the trackers, the targets' On*Synced are called,
// followed by SyncNeeded, so a syncer that waits for Synced() can run its
// first sync. Start does not block.
func (w *Informers) Start(ctx context.Context) {
	go w.services.RunWithContext(ctx)
	go w.slices.RunWithContext(ctx)
	go w.afterSync(ctx, "Service", w.svcStore, func(t Tracker) { t.OnServicesSynced() })
	go w.afterSync(ctx, "EndpointSlice", w.sliceStr, func(t Tracker) { t.OnEndpointSlicesSynced() })
}

func (w *Informers) afterSync(ctx context.Context, what string, s *directStore, notify func(Tracker)) {
	if !s.waitSynced(ctx) {
		return // ctx ended first
	}
	klog.V(2).InfoS("Initial list delivered", "kind", what)
	for _, t := range w.targets {
		notify(t.Tracker)
		if t.SyncNeeded != nil {
			t.SyncNeeded()
		}
	}
}

func (w *Informers) onService(oldObj, newObj any) {
	fanOut(w, "Service", oldObj, newObj, Tracker.OnParsedServiceUpdate)
}

func (w *Informers) onSlice(oldObj, newObj any) {
	fanOut(w, "EndpointSlice", oldObj, newObj, Tracker.OnParsedEndpointSliceUpdate)
}

// fanOut hands one event to every target's tracker, its own parse to each,
// and asks for a sync where the tracker says one is needed.
func fanOut[P any](w *Informers, kind string, oldObj, newObj any, update func(Tracker, P, P) bool) {
	old, okOld := asParsed[P](oldObj)
	cur, okNew := asParsed[P](newObj)
	if !okOld || !okNew {
		klog.InfoS("Ignoring unexpected object in "+kind+" event", "old", fmt.Sprintf("%T", oldObj), "new", fmt.Sprintf("%T", newObj))
		return
	}
	for i, t := range w.targets {
		if update(t.Tracker, old.target(i), cur.target(i)) && t.SyncNeeded != nil {
			t.SyncNeeded()
		}
	}
}

// asParsed returns obj as parses; a nil obj is a nil one. ok is false for
// anything else.
func asParsed[P any](obj any) (p *parsed[P], ok bool) {
	if obj == nil {
		return nil, true
	}
	p, ok = obj.(*parsed[P])
	return p, ok
}
