package watch

// Listing in pages, each page parsed as it arrives.
//
// client-go's reflectors take their initial list as a stream (watch-list):
// the API server sends every object as a watch event. For a client that
// only decodes them, one plain LIST per kind returns the same objects in
// about a third of the stream's time. A plain LIST decoded whole
// holds every object at once, though: the reflector keeps the decoded list
// until it hands it to its store. Here the Services and EndpointSlices are
// listed in pages instead, each page's objects parsed by the trackers
// (transform.go) before the next page is asked for, so no more than a page
// of decoded objects is ever held and the reflector receives only parses.
// A protobuf page is not even decoded whole: its items are decoded and
// parsed one at a time from the bytes as they came (rawpages.go).
//
// The list is consistent (resourceVersion "", what a streaming list gives
// too): an initial list at resourceVersion "0" may be served from a watch
// cache that is behind, and the first sync would then miss objects. API
// servers since 1.34 serve consistent and paginated lists from their watch
// cache (ConsistentListFromCache, ListFromCacheSnapshot), so this costs
// etcd nothing more than the streaming list does, and each page bounds the
// API server's memory as the stream did.
//
// A streaming list takes one token of the client's rate limiter
// (clientConnection.qps and burst: 5 and 10 by default); a list of 20 pages
// per kind through the same limiter waited 6 s for its tokens at 10k. So
// only a list's first page goes through the rate-limited client; its
// continuations, the same list read on, go through one that does not wait
// (Options.ContinuePages). The API server's own flow control still counts
// every page.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListPageSize is how many objects a page of a Service or EndpointSlice
// list asks for. For a decode-only client listing 10k Services and 10k
// slices, pages of 2,000 were as fast as pages of 5,000 and clearly faster
// than 500 or 1,000, within a small margin of one unpaged list; a page is
// held decoded only until it is parsed, so its size bounds that memory,
// which is held before the sync's peak.
const ListPageSize = 2000

// pagedList is a ListerWatcher that lists through api page by page, has
// parse make each listed object what the store keeps, and returns one
// parsedList of them; watches go to api unchanged. tweak applies the
// label selector to both.
type pagedList[L runtime.Object] struct {
	api listWatchAPI[L]
	// more reads a list's pages after the first: api without the client's
	// rate limiter.
	more     listWatchAPI[L]
	tweak    func(*metav1.ListOptions)
	parse    cache.TransformFunc
	pageSize int64
	// raw, when set, reads the pages instead of api and more
	// (rawpages.go); the tests' fake clients have none.
	raw *rawPages
	// sampler, when set, reports the initial list's size from its
	// first page (listsize.go).
	sampler *listSampler
}

func newPagedList[L runtime.Object](api, more listWatchAPI[L], tweak func(*metav1.ListOptions), parse cache.TransformFunc) *pagedList[L] {
	return &pagedList[L]{api: api, more: more, tweak: tweak, parse: parse, pageSize: ListPageSize}
}

// List ignores the reflector's paging (it would gather the decoded pages
// into one list) and does its own. A resourceVersion of "0", the
// reflector's first list, becomes "": consistent. Any other
// resourceVersion (a relist after a watch ended) is asked as
// NotOlderThan, what the reflector means by it: with a limit, an unset
// match makes it Exact, which the API server answers from etcd's history,
// a stale list, and after an API server restart a watch from there fails
// again at once (410), relisting the same stale list on the reflector's
// growing backoff (the e2e API server outage scenario: changes 15–30 s
// late).
func (p *pagedList[L]) List(o metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(context.Background(), o)
}

func (p *pagedList[L]) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	p.tweak(&o)
	switch {
	case o.ResourceVersion == "0":
		o.ResourceVersion, o.ResourceVersionMatch = "", ""
	case o.ResourceVersion != "" && o.ResourceVersionMatch == "":
		o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	o.Limit, o.Continue = p.pageSize, ""
	out := &parsedList{}
	var buf bytes.Buffer // the raw pages' buffer, one for the whole list
	for continued := false; ; continued = true {
		if !continued {
			p.sampler.begin()
		}
		lm, err := p.readPage(ctx, o, continued, &buf, out)
		if err != nil {
			return nil, err
		}
		if !continued {
			p.sampler.end(ctx, lm)
		}
		if lm.Continue == "" {
			out.ResourceVersion = lm.ResourceVersion
			return out, nil
		}
		// A continued list is at the first page's resourceVersion, which
		// the token carries; the API server refuses one given as well.
		o.Continue, o.ResourceVersion, o.ResourceVersionMatch = lm.Continue, "", ""
	}
}

// readPage reads one page (the first through api, the others through
// more), parses each of its objects into out and returns its metadata.
func (p *pagedList[L]) readPage(ctx context.Context, o metav1.ListOptions, continued bool,
	buf *bytes.Buffer, out *parsedList) (metav1.ListMeta, error) {
	add := func(obj runtime.Object) error { return p.add(obj, out) }
	if p.raw != nil {
		lm, err := p.raw.page(ctx, o, continued, buf, add)
		if err == nil && !continued {
			out.Items = slices.Grow(out.Items, listSize(&lm)-ListPageSize)
		}
		return lm, err
	}
	api := p.api
	if continued {
		api = p.more
	}
	page, err := api.List(ctx, o)
	if err != nil {
		return metav1.ListMeta{}, err
	}
	lm, err := meta.ListAccessor(page)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("list page: %w", err)
	}
	if out.Items == nil {
		out.Items = make([]runtime.Object, 0, listSize(lm))
	}
	if err := meta.EachListItem(page, add); err != nil {
		return metav1.ListMeta{}, err
	}
	return metav1.ListMeta{ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(),
		RemainingItemCount: lm.GetRemainingItemCount()}, nil
}

// add parses one listed object into out.
func (p *pagedList[L]) add(obj runtime.Object, out *parsedList) error {
	p.sampler.add(obj)
	parsed, err := p.parse(obj)
	if err != nil {
		return fmt.Errorf("parsing a listed object: %w", err)
	}
	o, ok := parsed.(runtime.Object)
	if !ok {
		return fmt.Errorf("parsing a listed object gave a %T", parsed)
	}
	out.Items = append(out.Items, o)
	return nil
}

// listSize is how many objects a list has in all, from its first page.
func listSize(lm metav1.ListInterface) int {
	n := 0
	if rest := lm.GetRemainingItemCount(); rest != nil && *rest > 0 && *rest < 1<<20 {
		n = int(*rest)
	}
	return n + int(ListPageSize)
}

func (p *pagedList[L]) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return p.WatchWithContext(context.Background(), o)
}

func (p *pagedList[L]) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	p.tweak(&o)
	return p.api.Watch(ctx, o)
}

// IsWatchListSemanticsUnSupported tells the reflector to list and then
// watch, never to stream its list: the point of listing in pages.
func (p *pagedList[L]) IsWatchListSemanticsUnSupported() bool { return true }

// parsedList is what pagedList returns: parses (parsed[P]), which the
// reflector hands to its store as they are.
type parsedList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

// DeepCopyObject makes parsedList a runtime.Object; the items are shared,
// as parsed's DeepCopyObject shares its parses.
func (l *parsedList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = append([]runtime.Object(nil), l.Items...)
	return &out
}

// listedLogger is the reflectors' logger without the one line client-go
// writes (at V(2)) when a ListerWatcher says it cannot stream: that it is
// "expected in unit tests but not in production". pagedList says so on
// purpose, and an operator reading -v=2 logs should not be sent looking.
func listedLogger(l logr.Logger) *logr.Logger {
	sink := l.GetSink()
	if sink == nil {
		return &l
	}
	// One frame more between the caller and the sink: the caller's line
	// is still the one logged.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	out := l.WithSink(&dropWatchListNotice{LogSink: sink})
	return &out
}

// dropWatchListNotice is a LogSink that drops that line.
type dropWatchListNotice struct{ logr.LogSink }

func (d *dropWatchListNotice) Info(level int, msg string, kv ...any) {
	if strings.Contains(msg, "doesn't support WatchList semantics") {
		return
	}
	d.LogSink.Info(level, msg, kv...)
}

func (d *dropWatchListNotice) WithValues(kv ...any) logr.LogSink {
	return &dropWatchListNotice{LogSink: d.LogSink.WithValues(kv...)}
}

func (d *dropWatchListNotice) WithName(name string) logr.LogSink {
	return &dropWatchListNotice{LogSink: d.LogSink.WithName(name)}
}

func (d *dropWatchListNotice) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := d.LogSink.(logr.CallDepthLogSink); ok {
		return &dropWatchListNotice{LogSink: cd.WithCallDepth(depth)}
	}
	return d
}
