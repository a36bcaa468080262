package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// sharedEvents posts Events about what every node decides alike from the
// same objects: a Service's lost frontend, a field every node ignores. Each
// node posts its own copy, and again after each restart; client-go's
// recorder folds repeats only within one process (its key holds the
// reporting instance, which names the host, but not the note, and its
// Events are named by the time), so N nodes would write N Events per fact,
// each restart N more.
//
// Here an Event's name is a digest of everything it says, and nothing in
// it is node-specific: every copy of one fact is the same object. The
// first create stores it; every other node, and every restart, gets
// AlreadyExists, which writes nothing. A changed fact says something else,
// so it is a new Event. The API server's event TTL removes an old one; a
// fact still true then is posted again the next time a node reports it.
type sharedEvents struct {
	client kubernetes.Interface
	queue  chan *eventsv1.Event
	// retryWait is the pause before a failed create is tried again.
	retryWait time.Duration
	// posted holds when each Event name was last stored or found stored,
	// so that a fact reported again (each resync parses every object)
	// costs no request for a while. Only run's goroutine uses it.
	posted map[string]time.Time
}

const (
	// sharedQueueLen bounds what waits for the API server; beyond it
	// Events are dropped (logged): a sync never waits for an Event.
	sharedQueueLen = 1000
	// sharedTries bounds the creates of one Event while the API server
	// does not answer.
	sharedTries = 5
	// sharedMemory is how long a posted Event is not asked for again:
	// well under the API server's default event TTL (1 h), so that one
	// that expired is soon posted again if still reported.
	sharedMemory = 10 * time.Minute
	// sharedMemoryLen bounds posted; past it, the expired names go.
	sharedMemoryLen = 10000
)

func newSharedEvents(ctx context.Context, client kubernetes.Interface) *sharedEvents {
	s := &sharedEvents{client: client, queue: make(chan *eventsv1.Event, sharedQueueLen),
		retryWait: 10 * time.Second, posted: map[string]time.Time{}}
	go s.run(ctx)
	return s
}

// post queues a Warning Event about ref. reason, action and note must not
// name the node: they are the same from every node.
func (s *sharedEvents) post(ref v1.ObjectReference, reason, action, note string) {
	if s == nil {
		return // a test's sink without an API server
	}
	ev := sharedEvent(ref, reason, action, clip(note), time.Now())
	select {
	case s.queue <- ev:
	default:
		klog.InfoS("Dropping an Event: too many wait for the API server", "reason", reason, "object", klog.KRef(ref.Namespace, ref.Name))
	}
}

// sharedEvent builds the Event every node builds alike but for its time.
func sharedEvent(ref v1.ObjectReference, reason, action, note string, now time.Time) *eventsv1.Event {
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: sharedEventName(ref, reason, action, note), Namespace: ns},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: reportingController,
		// Not the host, as the recorder sets it: the Event is every
		// node's, and the host is no business of the object's tenant.
		ReportingInstance: reportingController,
		Action:            action,
		Reason:            reason,
		Regarding:         ref,
		Note:              note,
		Type:              v1.EventTypeWarning,
	}
}

// sharedEventName is the object's name followed by a digest of what the
// Event says. The name is cut so that the whole stays a DNS subdomain of
// at most 253 characters.
func sharedEventName(ref v1.ObjectReference, reason, action, note string) string {
	h := sha256.New()
	for _, s := range []string{ref.APIVersion, ref.Kind, ref.Namespace, ref.Name, string(ref.UID), reason, action, note} {
		h.Write([]byte(s))
		h.Write([]byte{0}) // "ab"+"c" and "a"+"bc" differ
	}
	digest := hex.EncodeToString(h.Sum(nil))[:20]
	prefix := strings.ToLower(ref.Name)
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	prefix = strings.TrimRight(prefix, ".-")
	if prefix == "" {
		return digest
	}
	return prefix + "." + digest
}

func (s *sharedEvents) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-s.queue:
			if time.Since(s.posted[ev.Name]) < sharedMemory {
				continue
			}
			if s.create(ctx, ev) {
				s.remember(ev.Name)
			}
		}
	}
}

func (s *sharedEvents) remember(name string) {
	if len(s.posted) >= sharedMemoryLen {
		for n, t := range s.posted {
			if time.Since(t) >= sharedMemory {
				delete(s.posted, n)
			}
		}
	}
	if len(s.posted) < sharedMemoryLen {
		s.posted[name] = time.Now()
	}
}

// create stores ev unless it exists, trying again while the API server
// does not answer, and reports whether it is stored. A refusal (invalid,
// forbidden) is logged: the same Event would be refused again.
func (s *sharedEvents) create(ctx context.Context, ev *eventsv1.Event) bool {
	for try := 1; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.client.EventsV1().Events(ev.Namespace).Create(cctx, ev, metav1.CreateOptions{})
		cancel()
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return true
		case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
			klog.ErrorS(err, "API server refused an Event", "reason", ev.Reason, "event", klog.KObj(ev))
			return false
		case try == sharedTries || ctx.Err() != nil:
			klog.ErrorS(err, "Could not post an Event", "reason", ev.Reason, "event", klog.KObj(ev), "tries", try)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait.Jitter(s.retryWait, 0.25)):
		}
	}
}
