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
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Labels kube-proxy selects Services and EndpointSlices by.
const (
	// LabelServiceProxyName claims a Service for an alternative proxy.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless is set by the EndpointSlice controller on the slices of
	// headless Services.
	LabelHeadless = v1.IsHeadlessService
)

// Tracker is what the watcher feeds; model.Tracker implements it. Each On*
// method returns true when a sync is needed.
type Tracker interface {
	OnServiceUpdate(old, new *v1.Service) bool
	OnEndpointSliceUpdate(old, new *discoveryv1.EndpointSlice) bool
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
	// Reconnect is how a list or watch that did not reach the API server
	// is retried; the zero value means ReconnectBackoff.
	Reconnect wait.Backoff
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
// all targets (one per IP family).
type Informers struct {
	factory  informers.SharedInformerFactory
	services cache.SharedIndexInformer
	slices   cache.SharedIndexInformer
	targets  []Target
	// The handlers' registrations: synced once the handler has been given
	// every object of the initial list, which the informer's own HasSynced
	// does not wait for. The first sync must see them all: at a restart
	// it reconciles the kernel against the State, and a Service missing
	// from it would lose its rules until the next sync.
	servicesHandled, slicesHandled cache.ResourceEventHandlerRegistration
}

// NewInformers builds the label-filtered informers and registers the event
// handlers. Nothing runs until Start.
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
	factory := informers.NewSharedInformerFactory(client, opts.ResyncPeriod)
	w := &Informers{
		factory: factory,
		services: factory.InformerFor(&v1.Service{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			lw := listWatch[*v1.ServiceList](c.CoreV1().Services(metav1.NamespaceAll), tweak)
			return newInformer(lw, c, &v1.Service{}, "services", resync, backoff, leanObject)
		}),
		slices: factory.InformerFor(&discoveryv1.EndpointSlice{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			lw := listWatch[*discoveryv1.EndpointSliceList](c.DiscoveryV1().EndpointSlices(metav1.NamespaceAll), tweak)
			return newInformer(lw, c, &discoveryv1.EndpointSlice{}, "endpointslices", resync, backoff, leanObject)
		}),
		targets: targets,
	}
	if w.servicesHandled, err = w.services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onService(nil, obj) },
		UpdateFunc: w.onService,
		DeleteFunc: func(obj any) { w.onService(obj, nil) },
	}); err != nil {
		return nil, fmt.Errorf("registering Service handler: %w", err)
	}
	if w.slicesHandled, err = w.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onSlice(nil, obj) },
		UpdateFunc: w.onSlice,
		DeleteFunc: func(obj any) { w.onSlice(obj, nil) },
	}); err != nil {
		return nil, fmt.Errorf("registering EndpointSlice handler: %w", err)
	}
	return w, nil
}

// Start runs the informers until ctx is done. Once each handler has been
// given the initial list, the targets' On*Synced are called, followed by SyncNeeded, so a syncer that
// waits for Synced() can run its first sync. Start does not block.
func (w *Informers) Start(ctx context.Context) {
	w.factory.Start(ctx.Done())
	go w.afterSync(ctx, "Service", w.servicesHandled.HasSynced, func(t Tracker) { t.OnServicesSynced() })
	go w.afterSync(ctx, "EndpointSlice", w.slicesHandled.HasSynced, func(t Tracker) { t.OnEndpointSlicesSynced() })
}

func (w *Informers) afterSync(ctx context.Context, what string, synced cache.InformerSynced, notify func(Tracker)) {
	if !cache.WaitForNamedCacheSync(what, ctx.Done(), synced) {
		return // ctx ended first
	}
	for _, t := range w.targets {
		notify(t.Tracker)
		if t.SyncNeeded != nil {
			t.SyncNeeded()
		}
	}
}

func (w *Informers) onService(oldObj, newObj any) {
	fanOut(w, "Service", oldObj, newObj, Tracker.OnServiceUpdate)
}

func (w *Informers) onSlice(oldObj, newObj any) {
	fanOut(w, "EndpointSlice", oldObj, newObj, Tracker.OnEndpointSliceUpdate)
}

// fanOut hands one event, tombstones unwrapped, to every target's tracker
// and asks for a sync where the tracker says one is needed.
func fanOut[T any](w *Informers, kind string, oldObj, newObj any, update func(Tracker, T, T) bool) {
	old, okOld := unwrap[T](oldObj)
	cur, okNew := unwrap[T](newObj)
	if !okOld || !okNew {
		klog.InfoS("Ignoring unexpected object in "+kind+" event", "old", fmt.Sprintf("%T", oldObj), "new", fmt.Sprintf("%T", newObj))
		return
	}
	for _, t := range w.targets {
		if update(t.Tracker, old, cur) && t.SyncNeeded != nil {
			t.SyncNeeded()
		}
	}
}

// unwrap returns obj as a T, looking inside a delete tombstone (the informer
// missed the deletion and only knows the last state). A nil obj is a nil T.
// ok is false for anything else.
func unwrap[T any](obj any) (v T, ok bool) {
	if obj == nil {
		return v, true
	}
	if tomb, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
		obj = tomb.Obj
	}
	v, ok = obj.(T)
	return v, ok
}
