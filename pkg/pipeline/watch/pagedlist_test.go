package watch

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/watchlist"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// pagedServices is a Services API that serves n Services in pages as the
// API server does (limit, continue, resourceVersion on every page) and
// records what it was asked and what had been parsed before each page.
type pagedServices struct {
	n  int
	rv string

	mu       sync.Mutex
	calls    []metav1.ListOptions
	via      []string // which client each page was asked through
	parsedAt []int    // parses done when each page was asked for
	parsed   *int
	expireAt int // answer the page at this offset with 410 Gone once (0: never)
	// ports is each Service's number of ports. count says when a
	// page gives remainingItemCount: always, not with a label selector
	// (as the API server), or never.
	ports     int
	count     countRule
	watchOpts chan metav1.ListOptions
}

func (s *pagedServices) List(ctx context.Context, o metav1.ListOptions) (*v1.ServiceList, error) {
	return s.list(ctx, o, "limited")
}

// unlimited is the same API reached through the client without a rate
// limiter.
type unlimited struct{ *pagedServices }

func (u unlimited) List(ctx context.Context, o metav1.ListOptions) (*v1.ServiceList, error) {
	return u.list(ctx, o, "unlimited")
}

func (s *pagedServices) list(_ context.Context, o metav1.ListOptions, via string) (*v1.ServiceList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, o)
	s.via = append(s.via, via)
	s.parsedAt = append(s.parsedAt, *s.parsed)
	from := 0
	if o.Continue != "" {
		from, _ = strconv.Atoi(o.Continue)
	}
	if from != 0 && from == s.expireAt {
		s.expireAt = 0
		return nil, apierrors.NewResourceExpired("continue token expired")
	}
	to := s.n
	if o.Limit > 0 && from+int(o.Limit) < s.n {
		to = from + int(o.Limit)
	}
	list := &v1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: s.rv}}
	if to < s.n {
		list.Continue = strconv.Itoa(to)
		if s.count == countAlways || (s.count == countUnselected && o.LabelSelector == "") {
			rest := int64(s.n - to)
			list.RemainingItemCount = &rest
		}
	}
	for i := from; i < to; i++ {
		svc := testService(fmt.Sprintf("svc-%05d", i), nil)
		for p := range s.ports {
			svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Port: int32(80 + p)})
		}
		list.Items = append(list.Items, *svc)
	}
	return list, nil
}

// countRule is when a pagedServices page gives remainingItemCount.
type countRule int

const (
	countAlways countRule = iota
	countUnselected
	countNever
)

func (s *pagedServices) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	s.watchOpts <- o
	w := watch.NewFake()
	go func() { <-ctx.Done(); w.Stop() }()
	return w, nil
}

// countingTracker counts the Services parsed and delivered.
type countingTracker struct {
	recorder
	mu        sync.Mutex
	parses    int
	delivered map[string]bool
}

func (c *countingTracker) ParseService(svc *v1.Service) *model.ParsedService {
	c.mu.Lock()
	c.parses++
	c.mu.Unlock()
	return model.NewTracker(proxy.IPv4).ParseService(svc)
}

func (c *countingTracker) OnParsedServiceUpdate(_, cur *model.ParsedService) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delivered[cur.Name()] = true
	return true
}

func (c *countingTracker) parsed() *int { return &c.parses }

// listThrough lists api's Services through a pagedList reading its pages
// through transport (pageTransports), a reflector and a directStore into a
// countingTracker, until the list is delivered.
func listThrough(t *testing.T, transport string, api *pagedServices, tweak func(*metav1.ListOptions)) *countingTracker {
	t.Helper()
	tracker := &countingTracker{delivered: map[string]bool{}}
	api.parsed = tracker.parsed()
	w := &Informers{targets: []Target{{Tracker: tracker}}}
	lw := pagedListOver(t, transport, api, tweak, w.parseService)
	if !watchlist.DoesClientNotSupportWatchListSemantics(lw) {
		t.Fatal("the reflector would stream the list: pagedList must say it does not")
	}
	w.init(lw, noSlices(w))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.Start(ctx)
	if !w.svcStore.waitSynced(ctx) {
		t.Fatal("not synced")
	}
	return tracker
}

// TestPagedListParsesEachPage lists 2 pages and 234 Services: in pages of
// ListPageSize, each page parsed before the next is asked for,
// consistently (resourceVersion "" where the reflector asks for "0"), with
// the label selector on every page, the first page through the
// rate-limited client and the rest through the other; then the watch
// starts at the list's resourceVersion.
func TestPagedListParsesEachPage(t *testing.T) {
	for _, transport := range pageTransports {
		t.Run(transport, func(t *testing.T) { testPagedListParsesEachPage(t, transport) })
	}
}

func testPagedListParsesEachPage(t *testing.T, transport string) {
	api := &pagedServices{n: 2*ListPageSize + 234, rv: "777", watchOpts: make(chan metav1.ListOptions, 1)}
	tracker := listThrough(t, transport, api, func(o *metav1.ListOptions) { o.LabelSelector = "x!=y" })
	watchOpts := <-api.watchOpts
	tracker.mu.Lock()
	defer tracker.mu.Unlock()
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(tracker.delivered) != api.n || tracker.parses != api.n {
		t.Errorf("%d Services delivered, %d parsed; want %d", len(tracker.delivered), tracker.parses, api.n)
	}
	if len(api.calls) != 3 {
		t.Fatalf("%d pages asked for, want 3: %+v", len(api.calls), api.calls)
	}
	for i, o := range api.calls {
		if o.Limit != ListPageSize || o.ResourceVersion != "" || o.LabelSelector != "x!=y" {
			t.Errorf("page %d asked with %+v: want limit %d, resourceVersion \"\", the selector", i, o, ListPageSize)
		}
		if want := map[bool]string{true: "limited", false: "unlimited"}[i == 0]; api.via[i] != want {
			t.Errorf("page %d asked through the %s client, want the %s one", i, api.via[i], want)
		}
		if want := i * ListPageSize; api.parsedAt[i] != want {
			t.Errorf("page %d asked for after %d parses, want %d (each page parsed before the next)", i, api.parsedAt[i], want)
		}
	}
	if watchOpts.ResourceVersion != api.rv || watchOpts.LabelSelector != "x!=y" {
		t.Errorf("watch opened with %+v, want resourceVersion %s and the selector", watchOpts, api.rv)
	}
}

// TestPagedListExpiredContinue: a continue token that expired fails the
// list, and the reflector lists again from the start; nothing is lost.
func TestPagedListExpiredContinue(t *testing.T) {
	for _, transport := range pageTransports {
		t.Run(transport, func(t *testing.T) { testPagedListExpiredContinue(t, transport) })
	}
}

func testPagedListExpiredContinue(t *testing.T, transport string) {
	api := &pagedServices{n: 2*ListPageSize + 100, rv: "9", expireAt: 2 * ListPageSize, watchOpts: make(chan metav1.ListOptions, 1)}
	tracker := listThrough(t, transport, api, func(*metav1.ListOptions) {})
	tracker.mu.Lock()
	defer tracker.mu.Unlock()
	if len(tracker.delivered) != api.n {
		t.Errorf("%d Services delivered, want %d", len(tracker.delivered), api.n)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.calls) != 6 { // 3 pages, the third expired, then 3 again
		t.Errorf("%d pages asked for, want 6: %+v", len(api.calls), api.calls)
	}
}

// noSlices lists no EndpointSlices.
func noSlices(w *Informers) *pagedList[*v1.ServiceList] {
	none := &pagedServices{parsed: new(int), watchOpts: make(chan metav1.ListOptions, 1)}
	return newPagedList(none, none, func(*metav1.ListOptions) {}, w.parseSlice)
}

// TestListedLoggerDropsTheNotice: the reflectors' logger drops client-go's
// "not expected in production" notice about watch-list semantics, and
// nothing else.
func TestListedLoggerDropsTheNotice(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 9})
	l := listedLogger(base).WithName("services").WithValues("k", "v")
	l.V(2).Info("The client used to build this informer/reflector doesn't support WatchList semantics. The feature will be disabled.")
	l.V(2).Info("Caches populated")
	l.Error(nil, "failed to list")
	if len(lines) != 2 || !strings.Contains(lines[0], "Caches populated") || !strings.Contains(lines[1], "failed to list") {
		t.Errorf("logged %q, want the two other lines", lines)
	}
}

// TestPagedListResourceVersions: what each page asks for, by the
// resourceVersion the reflector lists at. A relist's resourceVersion must
// go as NotOlderThan: with a limit, an unset match means Exact, a stale
// list from etcd's history (this failed the e2e API server outage
// scenario).
func TestPagedListResourceVersions(t *testing.T) {
	for _, tc := range []struct {
		name          string
		rv            string
		match         metav1.ResourceVersionMatch
		wantRV        string
		wantFirstPage metav1.ResourceVersionMatch
	}{
		{"initial list", "0", "", "", ""},
		{"consistent", "", "", "", ""},
		{"relist", "123", "", "123", metav1.ResourceVersionMatchNotOlderThan},
		{"relist, match given", "123", metav1.ResourceVersionMatchExact, "123", metav1.ResourceVersionMatchExact},
	} {
		for _, transport := range pageTransports {
			t.Run(tc.name+"/"+transport, func(t *testing.T) {
				api := &pagedServices{n: ListPageSize + 1, rv: "456", parsed: new(int)}
				w := &Informers{targets: []Target{{Tracker: &countingTracker{delivered: map[string]bool{}}}}}
				lw := pagedListOver(t, transport, api, func(*metav1.ListOptions) {}, w.parseService)
				list, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: tc.rv, ResourceVersionMatch: tc.match})
				if err != nil {
					t.Fatal(err)
				}
				if got := list.(*parsedList); len(got.Items) != api.n || got.ResourceVersion != api.rv {
					t.Errorf("listed %d at %q, want %d at %q", len(got.Items), got.ResourceVersion, api.n, api.rv)
				}
				first, next := api.calls[0], api.calls[1]
				if first.ResourceVersion != tc.wantRV || first.ResourceVersionMatch != tc.wantFirstPage {
					t.Errorf("first page at %q/%q, want %q/%q", first.ResourceVersion, first.ResourceVersionMatch, tc.wantRV, tc.wantFirstPage)
				}
				if next.ResourceVersion != "" || next.ResourceVersionMatch != "" || next.Continue == "" {
					t.Errorf("second page asked with %+v: want only the continue token", next)
				}
			})
		}
	}
}
