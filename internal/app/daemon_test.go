package app

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/healthz"
	"github.com/svcproxy/svcproxy/internal/servicehealth"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// freeAddr is a loopback address:port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestNothingListensBeforeTheNodeExists: as upstream, the metrics and health
// ports (and svcproxy's state socket) stay closed while run waits for this
// Node. run stops at awaitNode here — the Node never appears —
// so nothing past it (sysctls, the kernel) is reached; serving before
// awaitNode would open the ports.
func TestNothingListensBeforeTheNodeExists(t *testing.T) {
	metricsAddr, healthzAddr := freeAddr(t), freeAddr(t)
	socket := filepath.Join(t.TempDir(), "svcproxy.sock")
	cfg := mustRun(t, "--hostname-override=n1", "--proxy-mode=nftables",
		"--metrics-bind-address="+metricsAddr, "--healthz-bind-address="+healthzAddr, "--state-socket="+socket)
	client := fake.NewClientset()
	d := &daemon{cfg: cfg, backend: testBackend(t, cfg.Mode), logger: klog.Background(), client: client, nodeName: "n1",
		node: newNodeView("n1", cfg.BindAddress), health: healthz.New(cfg.SyncPeriod, clock.RealClock{}),
		events: &eventSink{recorder: events.NewFakeRecorder(10), nodeName: "n1"},
		state:  debugstate.NewRecorder(), fatal: make(chan error, 4)}
	d.svcHealth = servicehealth.New(d.health.Healthy, d.events.healthCheckFailed)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("run did not return after its context ended")
		}
	}()
	// Wait until run asks for the Node twice (it is polling for it), then
	// check that neither port answers.
	deadline := time.Now().Add(10 * time.Second)
	for nodeGets(client) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("run never asked for its Node (actions %d)", len(client.Actions()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, addr := range map[string]string{"metrics": metricsAddr, "healthz": healthzAddr} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s port %s listens before the Node exists", name, addr)
		}
	}
	if _, err := os.Lstat(socket); !os.IsNotExist(err) {
		t.Errorf("the state socket exists before the Node does (%v)", err)
	}
}

// nodeGets counts the client's GETs of Nodes.
func nodeGets(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

// The quarantine is kept beside the state socket, per mode and family, so
// a restarted pod finds it on the same hostPath; without a socket, none.
func TestQuarantineFileBesideTheStateSocket(t *testing.T) {
	cfg := &config.Config{Mode: proxy.ModeNFTables, StateSocket: "/run/svcproxy/svcproxy.sock"}
	if got := quarantineFile(cfg, proxy.IPv6); got != "/run/svcproxy/quarantine-nftables-IPv6.json" {
		t.Errorf("quarantine file %q", got)
	}
	cfg.StateSocket = ""
	if got := quarantineFile(cfg, proxy.IPv4); got != "" {
		t.Errorf("quarantine file %q without a state socket, want none", got)
	}
}
