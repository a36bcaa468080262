//go:build benche2e

package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// measureListFloor is what the API server alone costs a start: a client
// that does what svcproxy's informers do for their initial lists — a
// streaming watch-list (client-go's default) of every Service and every
// EndpointSlice, protobuf, both at once — but only decodes and keeps
// nothing. No proxy can have its rules live sooner than this on the same
// machine; it is measured after the run, against the same API server.
func measureListFloor(t *testing.T, c *F.Cluster) float64 {
	client, err := protobufClient(c, true)
	if err != nil {
		t.Logf("list floor: %v", err)
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	svcs, slices := client.CoreV1().Services(""), client.DiscoveryV1().EndpointSlices("")
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		listOnce(ctx, &v1.Service{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return svcs.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return svcs.Watch(ctx, o) })
	})
	wg.Go(func() {
		listOnce(ctx, &discoveryv1.EndpointSlice{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return slices.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return slices.Watch(ctx, o) })
	})
	wg.Wait()
	if ctx.Err() != nil {
		t.Logf("list floor: %v", ctx.Err())
		return -1
	}
	secs := time.Since(start).Seconds()
	t.Logf("list floor: a decode-only client lists every Service and EndpointSlice in %.2f s", secs)
	return secs
}

// measurePlainListFloor is measureListFloor with one plain LIST per kind
// (resourceVersion 0: served from the API server's watch cache, one
// response each), what informers did before streaming lists.
func measurePlainListFloor(t *testing.T, c *F.Cluster) float64 {
	client, err := protobufClient(c, true)
	if err != nil {
		t.Logf("plain list floor: %v", err)
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := metav1.ListOptions{ResourceVersion: "0"}
	start := time.Now()
	var wg sync.WaitGroup
	var errs [2]error
	wg.Go(func() { _, errs[0] = client.CoreV1().Services("").List(ctx, opts) })
	wg.Go(func() { _, errs[1] = client.DiscoveryV1().EndpointSlices("").List(ctx, opts) })
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Logf("plain list floor: %v, %v", errs[0], errs[1])
		return -1
	}
	secs := time.Since(start).Seconds()
	t.Logf("plain list floor: one LIST per kind in %.2f s", secs)
	return secs
}

// measurePagedListFloor is measureListFloor with a consistent LIST in pages
// of 2,000 per kind (resourceVersion "", served from the watch cache's
// snapshots since 1.34), what svcproxy's informers do: each page decoded
// and dropped before the next is asked for. It also returns the CPU
// seconds etcd and kube-apiserver spent meanwhile. With compress false the
// client does not ask for gzip (client-go asks by default, and the API
// server compresses every response over 128 KB).
func measurePagedListFloor(t *testing.T, c *F.Cluster, compress bool) (secs, cpCPU float64) {
	client, err := protobufClient(c, compress)
	if err != nil {
		t.Logf("paged list floor: %v", err)
		return -1, -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cpPIDs := c.ControlPlanePIDs()
	cp0 := cpuOf(cpPIDs)
	start := time.Now()
	var wg sync.WaitGroup
	var errs [2]error
	wg.Go(func() {
		errs[0] = listPages(ctx, func(o metav1.ListOptions) (metav1.ListInterface, error) {
			return client.CoreV1().Services("").List(ctx, o)
		})
	})
	wg.Go(func() {
		errs[1] = listPages(ctx, func(o metav1.ListOptions) (metav1.ListInterface, error) {
			return client.DiscoveryV1().EndpointSlices("").List(ctx, o)
		})
	})
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Logf("paged list floor: %v, %v", errs[0], errs[1])
		return -1, -1
	}
	secs, cpCPU = time.Since(start).Seconds(), cpuOf(cpPIDs)-cp0
	t.Logf("paged list floor (compression %v): consistent LISTs in pages of 2,000 in %.2f s; API server + etcd CPU %.2f s",
		compress, secs, cpCPU)
	return secs, cpCPU
}

// listPages follows a list's continue tokens to its end.
func listPages(ctx context.Context, list func(metav1.ListOptions) (metav1.ListInterface, error)) error {
	o := metav1.ListOptions{Limit: 2000} // svcproxy's watch.ListPageSize
	for ctx.Err() == nil {
		page, err := list(o)
		if err != nil {
			return err
		}
		if o.Continue = page.GetContinue(); o.Continue == "" {
			return nil
		}
	}
	return ctx.Err()
}

// protobufClient is an admin client speaking protobuf, as a proxy's
// clientConnection does by default, asking for gzip (client-go's default)
// or not.
func protobufClient(c *F.Cluster, compress bool) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.AdminConfig)
	cfg.DisableCompression = !compress
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return kubernetes.NewForConfig(cfg)
}

// listOnce runs a reflector until its first list was delivered.
func listOnce(ctx context.Context, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	store := &discardStore{listed: make(chan struct{})}
	lw := &cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watchFn}
	r := cache.NewReflectorWithOptions(lw, obj, store, cache.ReflectorOptions{})
	go r.RunWithContext(ctx)
	select {
	case <-store.listed:
	case <-ctx.Done():
	}
}

// discardStore is a reflector store that keeps nothing and reports the
// end of the first list.
type discardStore struct {
	listed chan struct{}
	once   sync.Once
}

func (s *discardStore) Add(any) error    { return nil }
func (s *discardStore) Update(any) error { return nil }
func (s *discardStore) Delete(any) error { return nil }
func (s *discardStore) Replace([]any, string) error {
	s.once.Do(func() { close(s.listed) })
	return nil
}
func (s *discardStore) Resync() error { return nil }
