package watch

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// union follows one cluster-wide resource of which the proxy needs one
// list of values (every ServiceCIDR's ranges, every Node's addresses): at
// each change it recomputes the union from every object held, and reports
// it when it differs from the last one reported. The initial list is
// reported once, when all of it has been handled: recomputed at each of
// its objects, the union cost O(n²) at start.
type union[T comparable] struct {
	client kubernetes.Interface
	resync time.Duration
	// reconnect is how the watch retries an unreachable API server.
	reconnect wait.Backoff

	what    string
	of      func(objs []any) []T
	changed func([]T)

	// mu serializes updates: a late one must not report an older list.
	mu   sync.Mutex
	last []T
	// handled reports whether the handler has seen the initial list; nil
	// before start.
	handled func() bool
	// reported is set once the initial list's union was reported.
	reported atomic.Bool
}

// newUnion returns a union of what of makes of the objects, reported to
// changed (from the informer's goroutine).
func newUnion[T comparable](client kubernetes.Interface, resync time.Duration, what string, of func([]any) []T, changed func([]T)) union[T] {
	return union[T]{client: client, resync: resync, reconnect: ReconnectBackoff, what: what, of: of, changed: changed}
}

// start registers the handler on informer. Updates for which same(old,
// new) holds are not looked at: a Node's status changes every few minutes,
// its addresses almost never.
func (u *union[T]) start(ctx context.Context, informer cache.SharedIndexInformer, same func(old, new any) bool) error {
	list := informer.GetStore().List
	update := func(any) {
		if u.handled() {
			u.update(list)
		}
	}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: update,
		UpdateFunc: func(old, obj any) {
			if same == nil || !same(old, obj) {
				update(obj)
			}
		},
		DeleteFunc: update,
	})
	if err != nil {
		return err
	}
	u.handled = reg.HasSynced
	go func() {
		if pollUntil(ctx, time.Duration(math.MaxInt64), u.handled) {
			u.update(list)
			u.reported.Store(true)
		}
	}()
	return nil
}

// initialListPoll is how often WaitForInitialList looks: client-go's
// WaitForCacheSync polls every 100 ms, a tenth of a 10k start.
const initialListPoll = 5 * time.Millisecond

// WaitForInitialList blocks until the union of the initial list (an empty
// one too) has been reported, for at most timeout, and reports whether it
// has. An API server that does not serve the resource (disabled, or not
// allowed to this client) never lists it: the caller goes on without.
func (u *union[T]) WaitForInitialList(ctx context.Context, timeout time.Duration) bool {
	if u.handled == nil {
		return false
	}
	return pollUntil(ctx, timeout, u.reported.Load)
}

// pollUntil polls done every initialListPoll, for at most timeout, and
// reports whether it held.
func pollUntil(ctx context.Context, timeout time.Duration, done func() bool) bool {
	err := wait.PollUntilContextTimeout(ctx, initialListPoll, timeout, true, func(context.Context) (bool, error) {
		return done(), nil
	})
	return err == nil
}

// update reports the union of what list holds now; listing under the lock
// keeps a concurrent update from reporting an older list after a newer one.
func (u *union[T]) update(list func() []any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	values := u.of(list())
	if slices.Equal(values, u.last) && u.last != nil {
		return
	}
	u.last = values
	klog.V(2).InfoS(u.what+" changed", "count", len(values))
	u.changed(values)
}
