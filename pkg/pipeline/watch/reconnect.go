package watch

// Reconnecting after an API server outage.
//
// client-go's reflector retries a failed list or watch on its own backoff:
// 0.8 s doubling up to 30 s, each wait plus up to 100 % jitter, reset only
// when a retry comes 2 minutes after the last reset. Through an outage of a
// minute the waits grow to 25–60 s, so the first attempt after the API
// server is back can come that much later. That attempt's watch then ends
// at once with 410 Gone (a restarted API server's watch cache begins at the
// current etcd revision, newer than the one the reflector resumes from),
// and the reflector waits one more, longer step before it relists. After
// the e2e scenario's 60 s outage, changes took 43–101 s to be applied and
// the own Node's taint 54–101 s to be seen. client-go (v0.36) does not let
// an informer set that backoff, so the informers here read through
// reconnecting: calls that never reached the API server are retried in it,
// on a short capped schedule, and the reflector, which never sees them
// fail, keeps its backoff for what the API server answers. A loaded server
// answers 429 or 5xx, and for those the long backoff still spreads the
// load.

import (
	"context"
	"errors"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/klog/v2"
)

// ReconnectBackoff is how a list or watch that did not reach the API server
// is retried: 0.5 s doubling to 4 s, each plus up to 50 %. Once the server
// listens again the next attempt comes within 6 s. A refused connection
// costs the server nothing, and one every 4–6 s per informer (three per
// node) is little for one behind a load balancer that accepts and drops.
var ReconnectBackoff = wait.Backoff{
	Duration: 500 * time.Millisecond,
	Factor:   2,
	Jitter:   0.5,
	Steps:    10,
	Cap:      4 * time.Second,
}

// listWatchAPI is the part of a typed client (Services(ns),
// EndpointSlices(ns), Nodes()) that an informer uses.
type listWatchAPI[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// listWatch lists and watches through api with tweak applied to the
// options, as the generated informers do.
func listWatch[L runtime.Object](api listWatchAPI[L], tweak func(*metav1.ListOptions)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			list, err := api.List(ctx, o)
			if err != nil {
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return api.Watch(ctx, o)
		},
	}
}

// newInformer is the informer the factory would build for obj, reading
// through reconnecting. client only says whether it supports watch-list
// (fakes do not).
func newInformer(lw *cache.ListWatch, client any, obj runtime.Object, resource string, resync time.Duration, backoff wait.Backoff) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformerWithOptions(newReconnecting(lw, client, resource, backoff), obj,
		cache.SharedIndexInformerOptions{ResyncPeriod: resync})
}

// reconnecting is a ListerWatcher that retries calls that did not reach
// the API server until one does or the context ends.
type reconnecting struct {
	lw cache.ListerWatcherWithContext
	// noWatchList is true for clients without watch-list semantics; the
	// reflector asks, and must get the answer the client would give.
	noWatchList bool
	resource    string
	backoff     wait.Backoff
	// sleep waits d and reports false when ctx ended first; a field so
	// that tests need not wait.
	sleep func(ctx context.Context, d time.Duration) bool
}

func newReconnecting(lw cache.ListerWatcherWithContext, client any, resource string, backoff wait.Backoff) *reconnecting {
	return &reconnecting{
		lw:          lw,
		noWatchList: watchlist.DoesClientNotSupportWatchListSemantics(client),
		resource:    resource,
		backoff:     backoff,
		sleep:       sleepCtx,
	}
}

func (r *reconnecting) List(o metav1.ListOptions) (runtime.Object, error) {
	return r.ListWithContext(context.Background(), o)
}

func (r *reconnecting) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return r.WatchWithContext(context.Background(), o)
}

func (r *reconnecting) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	return retryUnreachable(ctx, r, "list", func() (runtime.Object, error) { return r.lw.ListWithContext(ctx, o) })
}

func (r *reconnecting) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return retryUnreachable(ctx, r, "watch", func() (watch.Interface, error) { return r.lw.WatchWithContext(ctx, o) })
}

// IsWatchListSemanticsUnSupported answers the reflector's question for the
// wrapped client.
func (r *reconnecting) IsWatchListSemanticsUnSupported() bool { return r.noWatchList }

// retryUnreachable calls call until it returns something other than an
// unreachable error, or ctx ends (then the last error is returned). An
// outage is logged once when it starts and once when it ends.
func retryUnreachable[T any](ctx context.Context, r *reconnecting, verb string, call func() (T, error)) (T, error) {
	backoff := r.backoff
	var down time.Time
	for {
		v, err := call()
		if !unreachable(err) || ctx.Err() != nil {
			if !down.IsZero() && ctx.Err() == nil { // not when shutting down
				klog.InfoS("API server answers again", "resource", r.resource, "verb", verb,
					"after", time.Since(down).Round(time.Millisecond), "err", err)
			}
			return v, err
		}
		if down.IsZero() {
			down = time.Now()
			klog.InfoS("API server unreachable; retrying", "resource", r.resource, "verb", verb, "err", err)
		}
		if !r.sleep(ctx, backoff.Step()) {
			return v, err
		}
	}
}

// unreachable reports whether err says that a request got no answer from
// the API server: a connection refused, reset, timed out or closed half
// way. Any answer, an error status such as 429 or 503 included, is not.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	return utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
