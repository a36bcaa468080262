package backends

import (
	"context"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// TestKernelEBPFTCHandsConnectionsOver: from ebpf mode with the tc
// programs to nftables mode and to iptables mode, TCP connections the
// programs translated, in both families, to node1's pods and
// (masqueraded) to node2's, are still open when the drain's wait ends
// (shortened here): the removal hands them to node1's conntrack with
// their translation, the programs go, and each connection goes on with
// its endpoint through the new mode's nat hooks.
func TestKernelEBPFTCHandsConnectionsOver(t *testing.T) {
	for _, to := range []Backend{nftablesBackend, iptablesBackend} {
		t.Run(string(to.Mode), func(t *testing.T) {
			shortTCDrain(t, nodeport.DrainTimes{Quiet: 300 * time.Millisecond, Idle: time.Second})
			env, cfg, pins := tcModeEnv(t)
			ctx := context.Background()
			newCfg := &config.Config{Mode: to.Mode, BPFPinDir: pins}

			byTC := connectedByTC(t, env, cfg)
			defer closeAll(byTC)

			rules := openRulesMode(t, env, to)
			syncAll(t, env, func(o *desired.Options) { to.Decide(newCfg, o) }, rules)
			// The daemon removes the leftovers in the node's network
			// namespace, whose conntrack takes the connections.
			err := env.Node1.NS.Do(func() error {
				if err := ebpfBackend.StopNewConnections(ctx, newCfg); err != nil {
					return err
				}
				return ebpfBackend.RemoveLeftovers(ctx, newCfg)
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := tcPrograms(t, env); n != 0 {
				t.Fatalf("after the removal of ebpf mode's leftovers: %d tc programs on fab0, want 0", n)
			}
			askAll(t, byTC, "ebpf+tc → "+string(to.Mode)+", the tc programs removed")
			askAll(t, byTC, "ebpf+tc → "+string(to.Mode)+", again")
		})
	}
}

// shortTCDrain sets the tc programs' drain times for the test.
func shortTCDrain(t *testing.T, times nodeport.DrainTimes) {
	old := tcDrainTimes
	tcDrainTimes = times
	t.Cleanup(func() { tcDrainTimes = old })
}

// TestKernelEBPFWithoutTCHandsConnectionsOver: a start of ebpf mode
// without the tc programs removes them in the background once both
// families' nftables halves have synced; the connections they translated,
// still open when the drain's wait (shortened here) ends, go to node1's
// conntrack, and each one goes on with its endpoint through the halves'
// nat hooks after the programs are gone.
func TestKernelEBPFWithoutTCHandsConnectionsOver(t *testing.T) {
	shortTCDrain(t, nodeport.DrainTimes{Quiet: 300 * time.Millisecond, Idle: time.Second})
	env, cfg, _ := tcModeEnv(t)
	byTC := connectedByTC(t, env, cfg)
	defer closeAll(byTC)

	without := *cfg
	without.BPFTCInterfaces = nil
	again := openEBPFMode(t, env, &without)
	syncAll(t, env, func(o *desired.Options) { ebpfBackend.Decide(&without, o) }, again.sync)
	for begun := time.Now(); tcPrograms(t, env) != 0; time.Sleep(100 * time.Millisecond) {
		if time.Since(begun) > 30*time.Second {
			t.Fatal("the tc programs still attached 30s after a start without them, their drain's wait a second")
		}
	}
	askAll(t, byTC, "ebpf+tc → ebpf, the tc programs removed")
}
