package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// reportingController is how upstream names itself in events; tools that
// filter kube-proxy's events keep working.
const reportingController = "kube-proxy"

// eventSink records kube-proxy's events through the events.k8s.io API:
// upstream's Events, about this node, through client-go's recorder; the
// Events about what every node decides alike, once for all nodes
// (sharedEvents).
type eventSink struct {
	recorder events.EventRecorder
	nodeName string
	// client sends finalWarning's Event itself (nil: through the recorder).
	client kubernetes.Interface
	// shared posts the Events about Services and their endpoints (nil:
	// none are posted).
	shared *sharedEvents
}

func newEventSink(ctx context.Context, client kubernetes.Interface, nodeName string) *eventSink {
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	return &eventSink{
		recorder: broadcaster.NewRecorder(scheme.Scheme, reportingController),
		nodeName: nodeName,
		client:   client,
		shared:   newSharedEvents(ctx, client),
	}
}

// finalWarning records a Warning Event about this Node for the error the
// process is about to exit with. The recorder sends events from a goroutine
// of its own, which the exit would cut short (upstream's hard-fail Event is
// lost that way), so this one is created here, within a few seconds.
func (e *eventSink) finalWarning(ctx context.Context, reason, note string) error {
	ref := v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: e.nodeName}
	if e.client == nil {
		e.recorder.Eventf(&ref, nil, v1.EventTypeWarning, reason, "StartKubeProxy", "%s", note)
		return nil
	}
	now := time.Now()
	host, _ := os.Hostname()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", e.nodeName, now.UnixNano()),
			Namespace: metav1.NamespaceDefault,
		},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: reportingController,
		ReportingInstance:   reportingController + "-" + host,
		Action:              "StartKubeProxy",
		Reason:              reason,
		Regarding:           ref,
		Note:                clip(note),
		Type:                v1.EventTypeWarning,
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := e.client.EventsV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Event %s: %w", reason, err)
	}
	return nil
}

// starting is the "birth cry": a Normal Starting event on this Node.
func (e *eventSink) starting() {
	ref := &v1.ObjectReference{Kind: "Node", Name: e.nodeName, UID: types.UID(e.nodeName)}
	e.recorder.Eventf(ref, nil, v1.EventTypeNormal, "Starting", "StartKubeProxy", "")
}

// healthCheckFailed reports a healthCheckNodePort that could not be opened.
func (e *eventSink) healthCheckFailed(svc proxy.ServiceName, err error) {
	ref := &v1.ObjectReference{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}
	e.recorder.Eventf(ref, nil, v1.EventTypeWarning, "FailedToStartServiceHealthcheck", "Listen",
		"node %s failed to start healthcheck %q: %v", e.nodeName, svc.String(), err)
}

// invalidParts reports what parsing an object ignored, one Warning per
// problem, its reason naming the field (model.Problem). Every node parses
// the object alike, so the note is the same from each: one Event.
func (e *eventSink) invalidParts(kind, namespace, name string, problems []error) {
	ref := v1.ObjectReference{Kind: kind, Namespace: namespace, Name: name}
	if kind == "EndpointSlice" {
		ref.APIVersion = "discovery.k8s.io/v1"
	}
	for _, err := range problems {
		reason := "InvalidField"
		var p *model.Problem
		if errors.As(err, &p) {
			reason = p.Reason
		}
		e.shared.post(ref, reason, "ParseObject", "ignored: "+clip(err.Error()))
	}
}

// quarantined reports a service port the kernel rejected, which is kept
// out of the dataplane until the Service or its endpoints change. The
// note quotes the backend's error, not the node: nodes whose kernels
// refuse alike post one Event. The kernel refused an attempt that added
// this port alone to rules it had accepted, so the error is about this
// port's rules, not about other tenants' Services.
func (e *eventSink) quarantined(port proxy.ServicePortName, err error) {
	ref := v1.ObjectReference{Kind: "Service", Namespace: port.Namespace, Name: port.Name}
	e.shared.post(ref, "KernelRejectedServicePort", "SyncProxyRules", fmt.Sprintf(
		"the kernel rejected the rules of port %q (%s); the rules it had before, if any, stay until the Service or its endpoints change or an hourly retry is accepted",
		port.String(), clip(err.Error())))
}

// frontendsLost reports external or LB IPs of a Service port that another
// claim holds: the reason names the field. The Event is readable in the
// loser's namespace, whose tenant chose the address and may be probing, so
// it names the winner only if that is in the same namespace.
func (e *eventSink) frontendsLost(port proxy.ServicePortName, lost []desired.LostFrontend) {
	ref := v1.ObjectReference{Kind: "Service", Namespace: port.Namespace, Name: port.Name}
	for _, l := range lost {
		if l.Refused == desired.RefusedNodeAddress {
			e.nodeAddressRefused(ref, port, l)
			continue
		}
		reason := "ExternalIPConflict"
		if l.Kind == desired.ClaimLoadBalancerIP {
			reason = "LoadBalancerIPConflict"
		}
		e.shared.post(ref, reason, "SyncProxyRules", fmt.Sprintf(
			"%s %s of port %q is not served: %s holds the same address, protocol and port",
			l.Kind, l.Addr, port.String(), claimant(port, l.Winner)))
	}
}

// claimant names the winner of a frontend lost by loser as far as loser's
// tenant may know it: a Service port of its own namespace by name, any
// other only as such.
func claimant(loser, winner proxy.ServicePortName) string {
	if winner.Namespace == loser.Namespace {
		return fmt.Sprintf("Service port %q", winner.String())
	}
	return "another Service"
}

// nodeAddressRefused reports an external or LB IP refused because it is an
// address of the node: the reason names the field. Every node refuses its
// own addresses alike, so the note names no node: one Event.
func (e *eventSink) nodeAddressRefused(ref v1.ObjectReference, port proxy.ServicePortName, l desired.LostFrontend) {
	reason := "ExternalIPIsNodeAddress"
	if l.Kind == desired.ClaimLoadBalancerIP {
		reason = "LoadBalancerIPIsNodeAddress"
	}
	e.shared.post(ref, reason, "SyncProxyRules", fmt.Sprintf(
		"%s %s of port %q is not served: it is an address of a node, whose own traffic it would take",
		l.Kind, l.Addr, port.String()))
}

// maxNoteDetail bounds what an event quotes of an error: the API refuses
// an event note over 1 kB, and errors quote tenants' values, which may be huge.
const maxNoteDetail = 600

func clip(s string) string {
	if len(s) <= maxNoteDetail {
		return s
	}
	n := maxNoteDetail
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // never cut a character in two
	}
	return s[:n] + "…"
}
