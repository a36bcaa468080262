package app

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/client-go/tools/events"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

func TestEventsForHostileInput(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	sink := &eventSink{recorder: rec, nodeName: "node1"}
	huge := strings.Repeat("é", 5000) // a tenant's value, quoted in the error
	sink.invalidParts("Service", "ns", "web", []error{
		&model.Problem{Reason: "InvalidExternalIP", Field: "spec.externalIPs[0]", Err: errors.New(huge)},
	})
	port := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: proxy.TCP}
	sink.quarantined(port, errors.New("netlink: file exists"))
	sink.frontendsLost(port, []desired.LostFrontend{{Addr: netip.MustParseAddr("172.30.0.10"), Kind: desired.ClaimExternalIP,
		Winner: proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "other", Name: "victim"}}}})
	sink.frontendsLost(port, []desired.LostFrontend{{Addr: netip.MustParseAddr("192.168.0.2"), Kind: desired.ClaimExternalIP,
		Refused: desired.RefusedNodeAddress}, {Addr: netip.MustParseAddr("192.168.0.2"), Kind: desired.ClaimLoadBalancerIP,
		Refused: desired.RefusedNodeAddress}})
	for _, want := range []string{"Warning InvalidExternalIP", "Warning KernelRejectedServicePort", "Warning ExternalIPConflict",
		"Warning ExternalIPIsNodeAddress", "Warning LoadBalancerIPIsNodeAddress"} {
		got := <-rec.Events
		if !strings.HasPrefix(got, want) {
			t.Errorf("event %q, want %s ...", got[:min(len(got), 80)], want)
		}
		if len(got) > 1024 {
			t.Errorf("event of %d bytes: the API refuses notes over 1 kB", len(got))
		}
		if !strings.Contains(got, "node1") {
			t.Errorf("event %q does not name the node", got[:min(len(got), 80)])
		}
	}
}
