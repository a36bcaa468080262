package watch

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// dialErr is what client-go returns when the API server's address does not
// accept connections (errno ECONNREFUSED) or drops them (ECONNRESET).
func dialErr(errno syscall.Errno) error {
	return &url.Error{Op: "Get", URL: "https://192.0.2.1:6443/api/v1/services", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}}
}

func TestUnreachable(t *testing.T) {
	gr := schema.GroupResource{Resource: "services"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", dialErr(syscall.ECONNREFUSED), true},
		{"connection reset", dialErr(syscall.ECONNRESET), true},
		{"EOF", &url.Error{Op: "Get", URL: "https://x", Err: io.EOF}, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"GOAWAY", errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1"), true},
		{"timeout", &url.Error{Op: "Get", URL: "https://x", Err: context.DeadlineExceeded}, true},
		{"410 Gone", apierrors.NewResourceExpired("too old resource version: 220 (230)"), false},
		{"429", apierrors.NewTooManyRequests("storage is (re)initializing", 1), false},
		{"500", apierrors.NewInternalError(errors.New("boom")), false},
		{"503", apierrors.NewServiceUnavailable("shutting down"), false},
		{"403", apierrors.NewForbidden(gr, "", errors.New("no")), false},
		{"wrapped API status", fmt.Errorf("listing: %w", apierrors.NewTooManyRequests("slow down", 1)), false},
		{"bad certificate", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, false},
		{"canceled", context.Canceled, false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("%s: unreachable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// scripted is a ListWatch whose calls fail with errs, in order, then
// succeed; sleeps records the waits between them.
type scripted struct {
	errs   []error
	calls  int
	sleeps []time.Duration
}

func (s *scripted) next() error {
	s.calls++
	if s.calls <= len(s.errs) {
		return s.errs[s.calls-1]
	}
	return nil
}

func (s *scripted) reconnecting() *reconnecting {
	r := newReconnecting(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if err := s.next(); err != nil {
				return nil, err
			}
			return &v1.ServiceList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			if err := s.next(); err != nil {
				return nil, err
			}
			return watch.NewFake(), nil
		},
	}, nil, "services", ReconnectBackoff)
	r.sleep = func(_ context.Context, d time.Duration) bool { s.sleeps = append(s.sleeps, d); return true }
	return r
}

func TestReconnectingRetriesUntilTheServerAnswers(t *testing.T) {
	refused := dialErr(syscall.ECONNREFUSED)
	// Waits grow from 0.5 s to the 4 s cap, each plus up to 50 %.
	wantMin := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	for _, verb := range []string{"list", "watch"} {
		s := &scripted{errs: slices.Repeat([]error{refused}, len(wantMin))}
		r := s.reconnecting()
		var err error
		if verb == "list" {
			_, err = r.ListWithContext(context.Background(), metav1.ListOptions{})
		} else {
			_, err = r.WatchWithContext(context.Background(), metav1.ListOptions{})
		}
		if err != nil || s.calls != len(wantMin)+1 {
			t.Fatalf("%s: err %v after %d calls, want success on call %d", verb, err, s.calls, len(wantMin)+1)
		}
		for i, d := range s.sleeps {
			if d < wantMin[i] || d > wantMin[i]*3/2 {
				t.Errorf("%s: wait %d = %v, want %v to %v", verb, i, d, wantMin[i], wantMin[i]*3/2)
			}
		}
	}
}

func TestReconnectingLeavesAnswersToTheReflector(t *testing.T) {
	for _, answer := range []error{
		apierrors.NewTooManyRequests("storage is (re)initializing", 1),
		apierrors.NewResourceExpired("too old resource version"),
		apierrors.NewServiceUnavailable("shutting down"),
	} {
		// Refused first: the outage ends with an answer, and that answer,
		// error or not, is the reflector's to handle.
		s := &scripted{errs: []error{dialErr(syscall.ECONNREFUSED), answer}}
		_, err := s.reconnecting().WatchWithContext(context.Background(), metav1.ListOptions{})
		if !errors.Is(err, answer) || s.calls != 2 {
			t.Errorf("%v: got %v after %d calls, want it returned from call 2", answer, err, s.calls)
		}
	}
}

func TestReconnectingStopsWithTheContext(t *testing.T) {
	s := &scripted{errs: slices.Repeat([]error{dialErr(syscall.ECONNREFUSED)}, 1000)}
	r := s.reconnecting()
	r.sleep = sleepCtx
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.ListWithContext(ctx, metav1.ListOptions{})
	if !unreachable(err) {
		t.Errorf("got %v, want the last connection error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned %v after the context ended", d)
	}
}

func TestReconnectingKeepsWatchListSemantics(t *testing.T) {
	clientset, err := kubernetes.NewForConfig(&rest.Config{Host: "https://192.0.2.1:6443"})
	if err != nil {
		t.Fatal(err)
	}
	lw := &cache.ListWatch{}
	if newReconnecting(lw, clientset, "services", ReconnectBackoff).IsWatchListSemanticsUnSupported() {
		t.Error("a real clientset lost watch-list")
	}
	if !newReconnecting(lw, fake.NewClientset(), "services", ReconnectBackoff).IsWatchListSemanticsUnSupported() {
		t.Error("the fake clientset, which cannot serve watch-list, was given it")
	}
}

// outage makes a fake clientset's API server unreachable for one resource
// and hands the test every watch it opens, so that it can end them and
// send events.
type outage struct {
	mu      sync.Mutex
	down    bool
	watches chan *watch.FakeWatcher
}

func newOutage(client *fake.Clientset, resource string) *outage {
	o := &outage{watches: make(chan *watch.FakeWatcher, 10)}
	client.PrependReactor("list", resource, func(clienttesting.Action) (bool, runtime.Object, error) {
		if o.isDown() {
			return true, nil, dialErr(syscall.ECONNREFUSED)
		}
		return false, nil, nil
	})
	client.PrependWatchReactor(resource, func(clienttesting.Action) (bool, watch.Interface, error) {
		if o.isDown() {
			return true, nil, dialErr(syscall.ECONNREFUSED)
		}
		w := watch.NewFakeWithChanSize(10, false)
		o.watches <- w
		return true, w, nil
	})
	return o
}

func (o *outage) isDown() bool { o.mu.Lock(); defer o.mu.Unlock(); return o.down }

func (o *outage) setDown(down bool) { o.mu.Lock(); o.down = down; o.mu.Unlock() }

func (o *outage) nextWatch(t *testing.T) *watch.FakeWatcher {
	t.Helper()
	select {
	case w := <-o.watches:
		return w
	case <-time.After(20 * time.Second):
		t.Fatal("no watch opened within 20 s")
		return nil
	}
}

// run ends the informer's watch, keeps the API server unreachable for 4 s
// and checks that the watch is open again within 1 s of its return, and
// delivers. The reflector's own backoff would retry 0.8–1.6 s into the
// outage, then 2.4–4.8 s, then 5.6–11.2 s.
func (o *outage) run(t *testing.T, send func(w *watch.FakeWatcher, name string), seen func(name string) bool) {
	first := o.nextWatch(t)
	send(first, "before") // an event, so that the watch does not count as failing early
	eventually(t, "the event before the outage", func() bool { return seen("before") })
	o.setDown(true)
	first.Stop()
	time.Sleep(4 * time.Second)
	o.setDown(false)
	up := time.Now()
	again := o.nextWatch(t)
	if d := time.Since(up); d > time.Second {
		t.Errorf("watch open again %v after the API server came back, want within 1 s", d)
	}
	send(again, "after")
	eventually(t, "the event after the outage", func() bool { return seen("after") })
}

// fastReconnect keeps the tests' retries well below their 1 s bound.
var fastReconnect = wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 10, Cap: 100 * time.Millisecond}

func TestInformersReconnectAfterOutage(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	o := newOutage(client, "services")
	r := &recorder{}
	w, err := NewInformers(client, Options{Reconnect: fastReconnect}, Target{Tracker: r})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.Start(ctx)
	o.run(t, func(w *watch.FakeWatcher, name string) { w.Add(testService(name, nil)) }, func(name string) bool {
		svcs, _, _ := r.snapshot()
		return slices.Contains(svcs, "add ns/"+name)
	})
}

func TestNodeWatchReconnectsAfterOutage(t *testing.T) {
	t.Parallel()
	var o *outage
	_, events := startNodeWatchWith(t, false, func(client *fake.Clientset, w *NodeWatcher) {
		o = newOutage(client, "nodes")
		w.reconnect = fastReconnect
	})
	// Each event moves the node to the zone named after it.
	o.run(t, func(w *watch.FakeWatcher, name string) {
		w.Modify(testNode("node-a", func(n *v1.Node) { n.Labels[LabelZone] = name }))
	}, func(name string) bool {
		_, zones, _ := events.get()
		return slices.Contains(zones, name)
	})
}
