package app

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
)

// testDaemon is a daemon with only what checkConfig and the event helpers
// use: the config, a known Node and a fake recorder.
func testDaemon(t *testing.T, cfg *config.Config, podCIDR string, nodeIPs ...string) (*daemon, *events.FakeRecorder) {
	t.Helper()
	rec := events.NewFakeRecorder(10)
	d := &daemon{cfg: cfg, backend: testBackend(t, cfg.Mode), logger: klog.Background(), node: newNodeView("n1", cfg.BindAddress),
		events: &eventSink{recorder: rec, nodeName: "n1"}, fatal: make(chan error, 1)}
	d.node.hostAddrs = func() []netip.Addr { return nil }
	var ips []netip.Addr
	for _, s := range nodeIPs {
		ips = append(ips, netip.MustParseAddr(s))
	}
	info := watch.NodeInfo{Name: "n1", IPs: ips}
	if podCIDR != "" {
		info.PodCIDRs = []netip.Prefix{netip.MustParsePrefix(podCIDR)}
	}
	d.node.set(info)
	return d, rec
}

func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestCheckConfigModeEvents(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    string // event prefix; "" means none
		wantErr string
	}{
		{"mode unset warns (KEP-5343)", nil, "Warning KubeProxyDefaultMode No kube-proxy mode specified", ""},
		{"explicit iptables is quiet", []string{"--proxy-mode=iptables"}, "", ""},
		{"ipvs is deprecated", []string{"--proxy-mode=ipvs"}, "Warning IPVSDeprecation The ipvs proxier has been deprecated", ""},
		{"unknown scheduler refused at start", []string{"--proxy-mode=ipvs", "--ipvs-scheduler=fancy"}, "", `scheduler "fancy"`},
		{"IPv6 podCIDRs on an IPv4 node are fatal in NodeCIDR mode", []string{"--proxy-mode=nftables", "--detect-local-mode=NodeCIDR"}, "", "node.spec.podCIDRs contains only IPv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustRun(t, append([]string{"--nodeport-addresses=primary"}, tc.args...)...)
			d, rec := testDaemon(t, cfg, "fd00:1::/64", "10.0.0.1")
			err := d.checkConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := drain(rec)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("events %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)):
				t.Errorf("events %q, want one starting %q", got, tc.want)
			}
		})
	}
}

// TestHardFailEvents: with both listeners failing under
// bindAddressHardFail, the first failure ends the process with one Warning
// Event (upstream's Run takes one failure and returns), and that Event has
// been sent when awaitFatal returns (the recorder's goroutine would lose it
// at exit). Before, each failure recorded its own Event through the
// recorder: two Events, both possibly lost.
func TestHardFailEvents(t *testing.T) {
	d, rec := testDaemon(t, mustRun(t), "")
	client := fake.NewClientset()
	d.events.client = client
	d.fatal = make(chan error, 4)
	d.hardFail("FailedToStartProxierHealthcheck") <- errors.New("listen tcp 10.0.0.1:10256: bind: address already in use")
	for len(d.fatal) < 1 {
		time.Sleep(time.Millisecond)
	}
	d.hardFail("FailedToStartMetricServer") <- errors.New("listen tcp 0.0.0.0:10249: bind: address already in use")
	for len(d.fatal) < 2 {
		time.Sleep(time.Millisecond)
	}
	err := d.awaitFatal(context.Background())
	if err == nil || !strings.Contains(err.Error(), ":10256: bind: address already in use") {
		t.Errorf("awaitFatal returned %v, want the healthz failure", err)
	}
	if got := drain(rec); len(got) != 0 {
		t.Errorf("recorder got %q; the final Event must be sent directly", got)
	}
	list, lerr := client.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Events, want 1: %+v", len(list.Items), list.Items)
	}
	e := list.Items[0]
	got := fmt.Sprintf("%s %s %s %s %s/%s %s", e.Type, e.Reason, e.Action, e.ReportingController, e.Regarding.Kind, e.Regarding.Name, e.Note)
	want := "Warning FailedToStartProxierHealthcheck StartKubeProxy kube-proxy Node/n1 listen tcp 10.0.0.1:10256: bind: address already in use"
	if got != want {
		t.Errorf("Event %q, want %q", got, want)
	}
}
