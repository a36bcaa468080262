package app

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// reportingController is how upstream names itself in events; tools that
// filter kube-proxy's events keep working.
const reportingController = "kube-proxy"

// eventSink records kube-proxy's events through the events.k8s.io API.
type eventSink struct {
	recorder events.EventRecorder
	nodeName string
}

func newEventSink(ctx context.Context, client kubernetes.Interface, nodeName string) *eventSink {
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	return &eventSink{
		recorder: broadcaster.NewRecorder(scheme.Scheme, reportingController),
		nodeName: nodeName,
	}
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
