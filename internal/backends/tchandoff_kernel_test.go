package backends

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelEBPFTCHandsConnectionsOver: from ebpf mode with the tc
// programs to nftables mode and to iptables mode, TCP connections (idle)
// and UDP flows (busy) the programs translated, in both families, to
// node1's pods and (masqueraded) to node2's, are still open when the
// drain's wait ends (shortened here): the removal hands them to node1's
// conntrack with their translation, the programs go, and each connection
// and flow goes on with its endpoint through the new mode's nat hooks.
func TestKernelEBPFTCHandsConnectionsOver(t *testing.T) {
	for _, to := range []Backend{nftablesBackend, iptablesBackend} {
		t.Run(string(to.Mode), func(t *testing.T) {
			shortTCDrain(t, nodeport.DrainTimes{Quiet: 300 * time.Millisecond, Idle: time.Second})
			env, cfg, pins := tcModeEnv(t)
			ctx := context.Background()
			newCfg := &config.Config{Mode: to.Mode, BPFPinDir: pins}

			byTC := connectedByTC(t, env, cfg)
			defer closeAll(byTC)
			udp := udpFlowsByTC(t, env)

			rules := openRulesMode(t, env, to)
			syncAll(t, env, func(o *desired.Options) { to.Decide(newCfg, o) }, rules)
			// The UDP flows send all along: they hold the programs until
			// the wait's end, the TCP connections, idle, hold nothing.
			stop := keepSending(udp)
			// The daemon removes the leftovers in the node's network
			// namespace, whose conntrack takes the connections.
			err := env.Node1.NS.Do(func() error {
				if err := ebpfBackend.StopNewConnections(ctx, newCfg); err != nil {
					return err
				}
				return ebpfBackend.RemoveLeftovers(ctx, newCfg)
			})
			stop()
			if err != nil {
				t.Fatal(err)
			}
			if n := tcPrograms(t, env); n != 0 {
				t.Fatalf("after the removal of ebpf mode's leftovers: %d tc programs on fab0, want 0", n)
			}
			askAll(t, byTC, "ebpf+tc → "+string(to.Mode)+", the tc programs removed")
			askAll(t, byTC, "ebpf+tc → "+string(to.Mode)+", again")
			askUDP(t, udp, "ebpf+tc → "+string(to.Mode)+", the tc programs removed")
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

// udpFlow is a UDP flow to node1's node port, a client's fixed source
// port, and the endpoint that answers it.
type udpFlow struct {
	client netnstest.Client
	dst    netip.AddrPort
	server string
}

// udpFlowsByTC opens switchConns UDP flows per family to node1's UDP node
// port 30011, each answered through the tc programs (tcMasqueraded),
// which serve it on their own.
func udpFlowsByTC(t *testing.T, env *scenario.Env) []udpFlow {
	t.Helper()
	var out []udpFlow
	for _, f := range scenario.Families {
		dst := netip.AddrPortFrom(env.Node1.IP(f.V6), 30011)
		for i := range switchConns {
			c := env.FromClient(f)
			c.SourcePort = uint16(41000 + i)
			ans, err := c.Ask(proxy.UDP, dst)
			if err != nil || !tcMasqueraded(env, ans, c.Source) {
				t.Fatalf("the UDP flow from port %d to %s: %v, %v; want an answer through the tc programs", c.SourcePort, dst, ans, err)
			}
			out = append(out, udpFlow{client: c, dst: dst, server: ans.Server})
		}
	}
	return out
}

// keepSending sends a datagram on each flow over and over until the
// returned stop is called.
func keepSending(flows []udpFlow) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			for _, u := range flows {
				_, _ = u.client.Ask(proxy.UDP, u.dst)
			}
			select {
			case <-quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() { close(quit); <-done }
}

// askUDP checks that each flow is still answered by its endpoint.
func askUDP(t *testing.T, flows []udpFlow, when string) {
	t.Helper()
	for _, u := range flows {
		ans, err := u.client.Ask(proxy.UDP, u.dst)
		if err != nil || ans.Server != u.server {
			t.Errorf("%s: the UDP flow from port %d to %s: %v, %v; want its endpoint %q", when, u.client.SourcePort, u.dst, ans, err, u.server)
		}
	}
}
