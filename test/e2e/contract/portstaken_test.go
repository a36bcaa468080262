package contract

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// The listener failures of upstream kube-proxy v1.37.1 (cmd/kube-proxy/app/
// server.go, serveHealthz, serveMetrics and the end of Run):
//   - without bindAddressHardFail, a failed listen is logged and retried every
//     5 s; the process keeps running and records no Event;
//   - with it, the first failure is sent to Run, which, after the "Starting"
//     birth cry, records one Warning Event about the Node (reason
//     FailedToStartProxierHealthcheck or FailedToStartMetricServer, action
//     StartKubeProxy, the error as note) and returns the error: the process
//     exits 1. With both ports taken, Run's select takes whichever failure it
//     picks; the other is never reported.
//
// comparePortsTaken provokes both on the two nodes, with the health
// (node IP:10256) and metrics (0.0.0.0:10249) ports of each node's namespace
// taken by a listener of the test before the proxy starts, and compares what
// each proxy does: keeps running or exits (and its status), and the Events
// it records about its Node (reason, type, action, controller, regarding).
func comparePortsTaken(t *testing.T, c *F.Cluster, b binaries, up, ours *F.Node, diffs *differences) {
	t.Run("retry", func(t *testing.T) {
		got := runWithPortsTaken(t, c, b, up, ours, 15*time.Second, func() {
			// Both retry every 5 s: once the ports are free they serve.
			for _, n := range []*F.Node{up, ours} {
				if err := c.WaitHealthz(n, 200, 30*time.Second); err != nil {
					t.Errorf("%s: /healthz after the ports were freed: %v", n.Name, err)
				}
			}
		})
		comparePortOutcomes(t, "ports-taken", got, diffs)
		if got[0].state() != "kept running" {
			t.Errorf("upstream without bindAddressHardFail %s; the step expects it to retry", got[0].state())
		}
	})
	for _, n := range []*F.Node{up, ours} {
		appendConfig(t, n.Config, "bindAddressHardFail: true\n")
	}
	t.Run("hard-fail", func(t *testing.T) {
		got := runWithPortsTaken(t, c, b, up, ours, 60*time.Second, nil)
		comparePortOutcomes(t, "ports-taken-hard-fail", got, diffs)
		if slices.Equal(got[0].events, got[1].events) {
			// Upstream's exit races its event broadcaster: now and then its
			// Warning gets out first. The difference stays deliberate.
			t.Log("upstream's Warning reached the API server before it exited, this time")
			diffs.explain("endpoint ports-taken-hard-fail events")
		}
		if got[0].state() != "exited 1" {
			t.Errorf("upstream with bindAddressHardFail %s; the step expects it to exit 1", got[0].state())
		}
		// What upstream's Run records (read in its source): its process
		// exits before the broadcaster sends either, so the comparison
		// alone would accept a svcproxy that sends nothing.
		recorded := []string{listenerFailure + " Warning/StartKubeProxy/kube-proxy", "Starting Normal/StartKubeProxy/kube-proxy"}
		if !slices.Equal(got[1].events, recorded) {
			t.Errorf("svcproxy's Events %v, want what upstream records, %v", got[1].events, recorded)
		}
		for _, e := range got[0].events {
			if !slices.Contains(recorded, e) {
				t.Errorf("upstream sent %q, which its Run does not record here: the expectation above is stale", e)
			}
		}
	})
}

// portOutcome is what one proxy did with its ports taken.
type portOutcome struct {
	running  bool
	exitCode int
	// events are the Events recorded about its own Node during the run, as
	// "reason type/action/controller", sorted, with FailedToStart* folded
	// into one name (see listenerFailure).
	events []string
	notes  []string
}

func (o portOutcome) state() string {
	if o.running {
		return "kept running"
	}
	return fmt.Sprintf("exited %d", o.exitCode)
}

func (o portOutcome) String() string { return fmt.Sprintf("%s, events %v", o.state(), o.events) }

// listenerFailure stands for either FailedToStart* reason: with both ports
// taken, upstream reports whichever failure its select picks.
const listenerFailure = "FailedToStart{ProxierHealthcheck|MetricServer}"

func isListenerFailure(e string) bool { return strings.HasPrefix(e, listenerFailure+" ") }

// runWithPortsTaken takes both ports on both nodes, starts upstream on up
// and svcproxy on ours, and waits until both have exited or observe has
// passed; then it frees the ports and runs afterFree (nil: nothing), and
// stops what still runs. It returns upstream's outcome, then svcproxy's.
func runWithPortsTaken(t *testing.T, c *F.Cluster, b binaries, up, ours *F.Node, observe time.Duration, afterFree func()) [2]portOutcome {
	t.Helper()
	var listeners []net.Listener
	for _, n := range []*F.Node{up, ours} {
		for _, addr := range []string{net.JoinHostPort(n.IP, "10256"), "0.0.0.0:10249"} {
			l, err := F.ListenIn(n.NS, "tcp", addr)
			if err != nil {
				t.Fatalf("taking %s in %s: %v", addr, n.Name, err)
			}
			listeners = append(listeners, l)
		}
	}
	free := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	defer free()
	seen := eventUIDs(t, c)
	upProc := startKubeProxy(t, c, up, b.kubeProxy)
	if err := c.StartProxy(ours); err != nil {
		t.Fatal(err)
	}
	procs := [2]*F.Proc{upProc, ours.Proxy}
	deadline := time.Now().Add(observe)
	for time.Now().Before(deadline) && (procs[0].Alive() || procs[1].Alive()) {
		time.Sleep(200 * time.Millisecond)
	}
	var got [2]portOutcome
	for i, p := range procs {
		got[i].running = p.Alive()
		if !got[i].running {
			// Already exited: Exited returns at once (a zero wait could
			// lose the select to its own timer).
			_, err := p.Exited(5 * time.Second)
			got[i].exitCode = exitCode(err)
		}
	}
	// An Event is sent after it is recorded: give both time to arrive.
	for i, n := range []*F.Node{up, ours} {
		got[i].events, got[i].notes = newNodeEvents(t, c, n, seen, 10*time.Second, got[i].running)
	}
	free()
	if afterFree != nil {
		afterFree()
	}
	for _, p := range procs {
		p.Stop(5 * time.Second)
	}
	return got
}

// comparePortOutcomes reports the differences between upstream's outcome
// (got[0]) and svcproxy's (got[1]): whether each kept running or its exit
// status under "endpoint <name> exit", its Events under "endpoint <name>
// events".
func comparePortOutcomes(t *testing.T, name string, got [2]portOutcome, diffs *differences) {
	t.Helper()
	t.Logf("upstream: %s; notes %q", got[0], got[0].notes)
	t.Logf("svcproxy: %s; notes %q", got[1], got[1].notes)
	if got[0].state() != got[1].state() {
		diffs.report(t, "endpoint "+name+" exit", []string{fmt.Sprintf("upstream %s, svcproxy %s", got[0].state(), got[1].state())})
	}
	if !slices.Equal(got[0].events, got[1].events) {
		diffs.report(t, "endpoint "+name+" events", []string{fmt.Sprintf("upstream %v, svcproxy %v", got[0].events, got[1].events)})
	}
}

// exitCode is the status a Proc's exit error carries (0 for nil, -1 when
// it is not an exit status).
func exitCode(err error) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		return -1
	}
}

// eventUIDs is every Event recorded so far.
func eventUIDs(t *testing.T, c *F.Cluster) map[types.UID]bool {
	t.Helper()
	list := listEvents(t, c)
	seen := make(map[types.UID]bool, len(list))
	for _, e := range list {
		seen[e.UID] = true
	}
	return seen
}

// newNodeEvents returns the Events about n's Node not in seen, with their
// notes. It waits up to wait for a listener failure to show, or the whole
// wait when the proxy still runs (an Event it should not send would come).
func newNodeEvents(t *testing.T, c *F.Cluster, n *F.Node, seen map[types.UID]bool, wait time.Duration, running bool) (events, notes []string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		events, notes = nil, nil
		for _, e := range listEvents(t, c) {
			if seen[e.UID] || e.Regarding.Kind != "Node" || e.Regarding.Name != n.Name {
				continue
			}
			reason := e.Reason
			if reason == "FailedToStartProxierHealthcheck" || reason == "FailedToStartMetricServer" {
				reason = listenerFailure
			}
			events = append(events, fmt.Sprintf("%s %s/%s/%s", reason, e.Type, e.Action, e.ReportingController))
			notes = append(notes, e.Reason+": "+e.Note)
		}
		slices.Sort(events)
		if time.Now().After(deadline) || (!running && slices.ContainsFunc(events, isListenerFailure)) {
			return events, notes
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// listEvents is every Event in the cluster.
func listEvents(t *testing.T, c *F.Cluster) []eventsv1.Event {
	t.Helper()
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	list, err := c.Admin.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}
