package watch

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// union follows one cluster-wide resource of which the proxy needs one
// list of values (every ServiceCIDR's ranges, every Node's addresses): at
// each change it recomputes the union from every object held, and reports
// it when it differs from the last one reported.
type union[T comparable] struct {
	what    string
	of      func(objs []any) []T
	changed func([]T)

	mu   sync.Mutex
	last []T
	// handled reports whether the handler has seen the initial list; nil
	// before start.
	handled func() bool
}

// start registers the handler on informer. Updates for which same(old,
// new) holds are not looked at: a Node's status changes every few minutes,
// its addresses almost never.
func (u *union[T]) start(informer cache.SharedIndexInformer, same func(old, new any) bool) error {
	store := informer.GetStore()
	update := func(any) { u.update(store.List()) }
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
	return nil
}

// initialListPoll is how often WaitForInitialList looks: client-go's
// WaitForCacheSync polls every 100 ms, a tenth of a 10k start.
const initialListPoll = 5 * time.Millisecond

// WaitForInitialList blocks until the handler has seen the initial list
// (an empty one too), for at most timeout, and reports whether it has. An
// API server that does not serve the resource (disabled, or not allowed
// to this client) never lists it: the caller goes on without.
func (u *union[T]) WaitForInitialList(ctx context.Context, timeout time.Duration) bool {
	if u.handled == nil {
		return false
	}
	err := wait.PollUntilContextTimeout(ctx, initialListPoll, timeout, true, func(context.Context) (bool, error) {
		return u.handled(), nil
	})
	return err == nil
}

func (u *union[T]) update(objs []any) {
	values := u.of(objs)
	u.mu.Lock()
	same := slices.Equal(values, u.last) && u.last != nil
	u.last = values
	u.mu.Unlock()
	if !same {
		klog.V(2).InfoS(u.what+" changed", "count", len(values))
		u.changed(values)
	}
}
