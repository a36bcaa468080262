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

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// reportingController is how upstream names itself in events; tools that
// filter kube-proxy's events keep working.
const reportingController = "kube-proxy"

// eventSink records kube-proxy's events through the events.k8s.io API.
type eventSink struct {
	recorder events.EventRecorder
	nodeName string
	// client sends finalWarning's Event itself (nil: through the recorder).
	client kubernetes.Interface
}

func newEventSink(ctx context.Context, client kubernetes.Interface, nodeName string) *eventSink {
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	return &eventSink{
		recorder: broadcaster.NewRecorder(scheme.Scheme, reportingController),
		nodeName: nodeName,
		client:   client,
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
// problem, its reason naming the field (model.Problem); identical events
// are folded into a series by the recorder.
func (e *eventSink) invalidParts(kind, namespace, name string, problems []error) {
	ref := &v1.ObjectReference{Kind: kind, Namespace: namespace, Name: name}
	if kind == "EndpointSlice" {
		ref.APIVersion = "discovery.k8s.io/v1"
	}
	for _, err := range problems {
		reason := "InvalidField"
		var p *model.Problem
		if errors.As(err, &p) {
			reason = p.Reason
		}
		e.recorder.Eventf(ref, nil, v1.EventTypeWarning, reason, "ParseObject", "node %s ignores %s", e.nodeName, clip(err.Error()))
	}
}

// quarantined reports a service port the kernel rejected, which this node
// keeps out of its dataplane until the Service or its endpoints change.
func (e *eventSink) quarantined(port proxy.ServicePortName, err error) {
	ref := &v1.ObjectReference{Kind: "Service", Namespace: port.Namespace, Name: port.Name}
	e.recorder.Eventf(ref, nil, v1.EventTypeWarning, "KernelRejectedServicePort", "SyncProxyRules",
		"node %s: the kernel rejected the rules of port %q (%s); they are left out until the Service or its endpoints change",
		e.nodeName, port.String(), clip(err.Error()))
}

// frontendsLost reports external or LB IPs of a Service port that another
// Service holds with a higher claim: the reason names the field.
func (e *eventSink) frontendsLost(port proxy.ServicePortName, lost []desired.LostFrontend) {
	ref := &v1.ObjectReference{Kind: "Service", Namespace: port.Namespace, Name: port.Name}
	for _, l := range lost {
		if l.Refused == desired.RefusedNodeAddress {
			e.nodeAddressRefused(ref, port, l)
			continue
		}
		reason := "ExternalIPConflict"
		if l.Kind == desired.ClaimLoadBalancerIP {
			reason = "LoadBalancerIPConflict"
		}
		e.recorder.Eventf(ref, nil, v1.EventTypeWarning, reason, "SyncProxyRules",
			"node %s: %s %s of port %q is not served: %s holds the same address, protocol and port",
			e.nodeName, l.Kind, l.Addr, port.String(), l.Winner.String())
	}
}

// nodeAddressRefused reports an external or LB IP refused because it is
// this node's address: the reason names the field.
func (e *eventSink) nodeAddressRefused(ref *v1.ObjectReference, port proxy.ServicePortName, l desired.LostFrontend) {
	reason := "ExternalIPIsNodeAddress"
	if l.Kind == desired.ClaimLoadBalancerIP {
		reason = "LoadBalancerIPIsNodeAddress"
	}
	e.recorder.Eventf(ref, nil, v1.EventTypeWarning, reason, "SyncProxyRules",
		"node %s: %s %s of port %q is not served: it is an address of the node, whose own traffic it would take",
		e.nodeName, l.Kind, l.Addr, port.String())
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
