//go:build ipvsvm

// Built only with -tags ipvsvm, into the test binary hack/ipvs-vm.sh boots
// in its qemu VM (this kernel has no IPVS); the tc programs need tc links,
// which the release's stock kernel lacks, so the VM boots this one:
// ipvs-vm kernel: linux-image-6.12-amd64

package backends

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestVMEBPFTCModeSwitchWithIPVS switches node1 from ebpf mode with the tc
// programs to IPVS mode and back, as the daemon does (the new mode syncs,
// then removes the old mode's leftovers). To IPVS: the TCP connections the
// tc programs translated stay open through a node port, keep their endpoint
// and are not reset, while IPVS's virtual servers take the new ones once
// the drain has begun (until then the tc programs, which see the packets
// first, take them: drainBegun); the programs leave once the connections
// they translated closed (the drain's quiet time after their last packet).
// The test waits a minute for that, less than the drain's idle limit, so
// that a drain that ends only at its limit, a flow still holding it, fails.
// Back: new connections go to the tc programs, and IPVS's virtual servers
// and its dummy link go.
func TestVMEBPFTCModeSwitchWithIPVS(t *testing.T) {
	env, cfg, pins := tcModeEnv(t)
	ctx := context.Background()
	ipvsCfg := &config.Config{Mode: proxy.ModeIPVS, BPFPinDir: pins}
	dst := netip.AddrPortFrom(env.Node1.IPv4, 30010)
	client := env.FromClient(scenario.Families[0])

	withTC := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return withTC.cleanup(ctx) }) })
	syncAll(t, env, func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }, withTC.sync)
	byTC := dialAll(t, client, dst, func(ans netnstest.Answer) bool { return tcMasqueraded(env, ans, client.Source) })
	stopEBPFMode(withTC)

	syncAll(t, env, func(o *desired.Options) { ipvsBackend.Decide(ipvsCfg, o) }, openIPVSMode(t, env))
	removed := make(chan error, 1)
	go func() { removed <- env.Node1.NS.Do(func() error { return ebpfBackend.RemoveLeftovers(ctx, ipvsCfg) }) }()
	askAll(t, byTC, "ebpf+tc → ipvs")
	drainBegun(t, pins)
	byIPVS := dialAll(t, client, dst, func(netnstest.Answer) bool { return true })
	notByTCAfterDrainBegun(t, env, pins, dst, byIPVS)
	tcRemovedAfterClose(t, removed, byTC, func() string {
		return tcDrainReport(env, pins, dst, connLabels(map[string][]heldConn{"byTC": byTC, "byIPVS": byIPVS}))
	})
	if _, err := os.Stat(filepath.Join(pins, "tc")); !os.IsNotExist(err) {
		t.Errorf("after the removal of ebpf mode's leftovers the tc pins remain (%v)", err)
	}
	if n := tcPrograms(t, env); n != 0 {
		t.Errorf("after the removal of ebpf mode's leftovers: %d tc programs on fab0, want 0", n)
	}
	askAll(t, byIPVS, "ipvs after the removal")
	closeAll(byIPVS)

	again := openEBPFMode(t, env, cfg)
	syncAll(t, env, func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }, again.sync)
	if err := env.Node1.NS.Do(func() error { return ipvsBackend.RemoveLeftovers(ctx, cfg) }); err != nil {
		t.Fatalf("removing IPVS mode's leftovers: %v", err)
	}
	closeAll(dialAll(t, client, dst, func(ans netnstest.Answer) bool { return tcMasqueraded(env, ans, client.Source) }))
	noIPVSLeft(t, env)
}

// openIPVSMode opens IPVS mode's row for both families in node1, as the
// daemon does (Init, then syncs), and returns its sync; the row is closed
// at the end of the test.
func openIPVSMode(t *testing.T, env *scenario.Env) stateSync {
	t.Helper()
	return openMode(t, env, ipvsBackend, true)
}

// noIPVSLeft checks that node1 has no virtual server and no dummy link of
// IPVS mode's.
func noIPVSLeft(t *testing.T, env *scenario.Env) {
	t.Helper()
	err := env.Node1.NS.Do(func() error {
		h, err := kipvs.New("")
		if err != nil {
			return err
		}
		defer h.Close()
		svcs, err := h.ListServices()
		if err != nil {
			return err
		}
		if len(svcs) != 0 {
			t.Errorf("after IPVS mode's leftovers were removed: %d virtual servers, want 0", len(svcs))
		}
		if _, err := net.InterfaceByName(ipvs.DummyLink); err == nil {
			t.Errorf("after IPVS mode's leftovers were removed: %s remains", ipvs.DummyLink)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// drainBegun waits until the drain of the tc programs pinned under pins
// has begun: their frontends are gone in both families, so that a new
// connection to a node port is no longer theirs. A new mode's first sync
// does not take the node ports from the tc programs by itself: they see
// the packets first, and take new connections until the leftovers removal
// clears their frontends (before any removal: StopNewConnections; ebpf
// mode's RemoveLeftovers, run alone, before the socket hooks go); the
// drain then holds such a connection like any other it translated.
func drainBegun(t *testing.T, pins string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := tcFrontends(pins)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tc programs still have %d frontends a minute after the removal of ebpf mode's leftovers began", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
