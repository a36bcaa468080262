package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var (
	webPort = proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "tenant-a", Name: "web"}, Port: "http", Protocol: proxy.TCP}
	// A Service of another tenant, which tenant-a must not learn of.
	foreignPort = proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "tenant-b", Name: "payroll"}, Port: "http", Protocol: proxy.TCP}
	// A Service of tenant-a itself.
	siblingPort = proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "tenant-a", Name: "shop"}, Port: "http", Protocol: proxy.TCP}
)

func lostTo(winner proxy.ServicePortName) []desired.LostFrontend {
	return []desired.LostFrontend{{Addr: netip.MustParseAddr("172.30.0.10"), Kind: desired.ClaimExternalIP, Winner: winner}}
}

// postFrom has one eventSink per node name (a repeated name is that node
// restarted) post through one fake API server, and returns every Event
// they tried to create, in order, once all have tried: perNode Events each,
// which the sinks post asynchronously.
func postFrom(t *testing.T, nodes []string, perNode int, post func(*eventSink)) (*fake.Clientset, []*eventsv1.Event) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := fake.NewClientset()
	for _, n := range nodes {
		post(newEventSink(ctx, client, n))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		created := createdEvents(client)
		if len(created) >= perNode*len(nodes) {
			return client, created
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Events created within 10s, want %d", len(created), perNode*len(nodes))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// createdEvents returns the Events of every create request the client got,
// including those the server refused as already existing.
func createdEvents(client *fake.Clientset) []*eventsv1.Event {
	var out []*eventsv1.Event
	for _, a := range client.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && c.GetResource().Resource == "events" {
			if ev, ok := c.GetObject().(*eventsv1.Event); ok {
				out = append(out, ev)
			}
		}
	}
	return out
}

func asJSON(t *testing.T, ev *eventsv1.Event) string {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConflictEventHidesOtherNamespaces: the loser's Event is readable by
// its own tenant, who can create Services with guessed addresses; it must
// not tell them which Service of another namespace holds an address.
func TestConflictEventHidesOtherNamespaces(t *testing.T) {
	_, created := postFrom(t, []string{"node-a"}, 1, func(s *eventSink) { s.frontendsLost(webPort, lostTo(foreignPort)) })
	ev := created[0]
	if ev.Reason != "ExternalIPConflict" || ev.Regarding.Namespace != "tenant-a" || ev.Regarding.Name != "web" {
		t.Fatalf("Event %s on %s/%s, want ExternalIPConflict on tenant-a/web", ev.Reason, ev.Regarding.Namespace, ev.Regarding.Name)
	}
	for _, secret := range []string{"tenant-b", "payroll"} {
		if all := asJSON(t, ev); strings.Contains(all, secret) {
			t.Errorf("the Event names the other tenant's %q: %s", secret, ev.Note)
		}
	}
	if !strings.Contains(ev.Note, "172.30.0.10") || !strings.Contains(ev.Note, "another Service") {
		t.Errorf("note %q, want the address and that another Service holds it", ev.Note)
	}
}

// TestConflictEventNamesSameNamespaceWinner: within one namespace the
// tenant can list the winner anyway, and its name says what to fix.
func TestConflictEventNamesSameNamespaceWinner(t *testing.T) {
	_, created := postFrom(t, []string{"node-a"}, 1, func(s *eventSink) { s.frontendsLost(webPort, lostTo(siblingPort)) })
	if note := created[0].Note; !strings.Contains(note, "tenant-a/shop:http") {
		t.Errorf("note %q does not name the winner tenant-a/shop:http", note)
	}
}

// TestEventsFromEveryNodeAreOne: every node decides these alike, so each
// node's Event must be the same object: byte for byte the same but for
// its time, under the same name, so the API server keeps the first and
// refuses the others as already existing — also after a restart. Nothing
// in it may name the node.
func TestEventsFromEveryNodeAreOne(t *testing.T) {
	problem := &model.Problem{Reason: "InvalidExternalIP", Field: "spec.externalIPs[0]", Err: errors.New("not an IP address")}
	for name, post := range map[string]func(*eventSink){
		"ExternalIPConflict":        func(s *eventSink) { s.frontendsLost(webPort, lostTo(foreignPort)) },
		"KernelRejectedServicePort": func(s *eventSink) { s.quarantined(webPort, errors.New("nft: netlink: File exists")) },
		"InvalidExternalIP":         func(s *eventSink) { s.invalidParts("Service", "tenant-a", "web", []error{problem}) },
		"InvalidIPVSScheduler": func(s *eventSink) {
			s.refusedSetting(webPort.ServiceName, testBackend(t, proxy.ModeIPVS).RefusedSetting("nope"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			client, created := postFrom(t, []string{"node-a", "node-b", "node-a"}, 1, post)
			first := created[0]
			for i, ev := range created {
				if all := asJSON(t, ev); strings.Contains(all, "node-a") || strings.Contains(all, "node-b") {
					t.Errorf("Event %d names a node: %s", i, ev.Note)
				}
				ev.EventTime = first.EventTime
				if a, b := asJSON(t, first), asJSON(t, ev); a != b {
					t.Errorf("Event %d differs from the first:\n%s\n%s", i, b, a)
				}
			}
			list, err := client.EventsV1().Events("tenant-a").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 {
				t.Errorf("%d Events stored, want 1", len(list.Items))
			}
		})
	}
}

// TestEventNotesAreBounded: errors quote tenants' values, and the API
// refuses a note over 1 kB.
func TestEventNotesAreBounded(t *testing.T) {
	huge := strings.Repeat("é", 5000)
	_, created := postFrom(t, []string{"node-a", "node-a"}, 2, func(s *eventSink) {
		s.invalidParts("Service", "tenant-a", "web", []error{
			&model.Problem{Reason: "InvalidExternalIP", Field: "spec.externalIPs[0]", Err: errors.New(huge)},
		})
		s.quarantined(webPort, errors.New(huge))
	})
	for _, ev := range created {
		if len(ev.Note) > 1024 {
			t.Errorf("%s note of %d bytes: the API refuses notes over 1 kB", ev.Reason, len(ev.Note))
		}
	}
}

// TestSharedEventNameIsValid: the name is a DNS subdomain the API server
// accepts, whatever the regarded object's name, and differs with the note.
func TestSharedEventNameIsValid(t *testing.T) {
	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 62) + "." + strings.Repeat("c", 62) + "." + strings.Repeat("d", 62)
	for _, name := range []string{"web", long, long[:200] + "-x"} {
		ref := v1.ObjectReference{Kind: "EndpointSlice", Namespace: "tenant-a", Name: name}
		got := sharedEventName(ref, "InvalidEndpointAddress", "ParseObject", "ignored: x")
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("name %q: %v", got, errs)
		}
		if got == sharedEventName(ref, "InvalidEndpointAddress", "ParseObject", "ignored: y") {
			t.Errorf("two notes share the name %q", got)
		}
	}
}

// TestSharedEventRepeatIsNotSent: a fact reported again by the same node
// (every resync parses every object anew) costs no request.
func TestSharedEventRepeatIsNotSent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	sink := newEventSink(ctx, client, "node-a")
	problem := &model.Problem{Reason: "InvalidExternalIP", Field: "spec.externalIPs[0]", Err: errors.New("not an IP address")}
	sink.invalidParts("Service", "tenant-a", "web", []error{problem, problem})
	sink.quarantined(webPort, errors.New("nft: netlink: File exists"))
	sink.invalidParts("Service", "tenant-a", "web", []error{problem})
	// The queue is worked in order: once the last one is created, every
	// earlier one has been created or skipped.
	sink.refusedSetting(webPort.ServiceName, testBackend(t, proxy.ModeIPVS).RefusedSetting("nope"))
	var reasons []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		reasons = reasons[:0]
		for _, ev := range createdEvents(client) {
			reasons = append(reasons, ev.Reason)
		}
		if len(reasons) > 0 && reasons[len(reasons)-1] == "InvalidIPVSScheduler" {
			break
		}
	}
	if want := "InvalidExternalIP KernelRejectedServicePort InvalidIPVSScheduler"; strings.Join(reasons, " ") != want {
		t.Errorf("created %v, want %s", reasons, want)
	}
}

// TestNodeAddressRefusalEvents: an external or LB IP refused for being a
// node's address gets its own reason, and, decided alike on every node,
// names none.
func TestNodeAddressRefusalEvents(t *testing.T) {
	refused := []desired.LostFrontend{
		{Addr: netip.MustParseAddr("192.168.0.2"), Kind: desired.ClaimExternalIP, Refused: desired.RefusedNodeAddress},
		{Addr: netip.MustParseAddr("192.168.0.2"), Kind: desired.ClaimLoadBalancerIP, Refused: desired.RefusedNodeAddress},
	}
	_, created := postFrom(t, []string{"node-a", "node-b"}, 2, func(s *eventSink) { s.frontendsLost(webPort, refused) })
	reasons := map[string]bool{}
	for _, ev := range created {
		reasons[ev.Reason] = true
		if strings.Contains(ev.Note, "node-a") || strings.Contains(ev.Note, "node-b") {
			t.Errorf("%s names a node: %s", ev.Reason, ev.Note)
		}
	}
	if !reasons["ExternalIPIsNodeAddress"] || !reasons["LoadBalancerIPIsNodeAddress"] || len(reasons) != 2 {
		t.Errorf("reasons %v, want ExternalIPIsNodeAddress and LoadBalancerIPIsNodeAddress", reasons)
	}
}
