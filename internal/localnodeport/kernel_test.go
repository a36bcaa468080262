package localnodeport

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelLocalhostNodePorts sends real packets from node1 itself to its
// node ports on loopback (nodePortAddresses: localhost), with the nftables
// table programmed in each of upstream's three modes, one after the other
// over the same table (a restart with another setting):
//
//   - gate off: nothing answers (TCP refused by the kernel, UDP port
//     unreachable), and no counter exists;
//   - gate on, no proxy: every protocol is rejected by the table and
//     counted (TCP too: the rule, not a missing listener, refuses it);
//   - gate on with the proxy: TCP reaches the Service's endpoints through
//     the userspace proxy (eTP=Local: the local endpoint only; none: no
//     listener, refused); UDP is rejected and counted.
func TestKernelLocalhostNodePorts(t *testing.T) {
	requireKernel(t)
	env := scenario.NewEnv(t)
	node := netnstest.Client{NS: env.Node1.NS}
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			st := localhostState(t, env, f)
			lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
			if f.V6 {
				lo = netip.IPv6Loopback()
			}
			spread := netip.AddrPortFrom(lo, 30010)
			for _, tc := range []struct {
				mode               desired.LocalhostNodePorts
				tcp, udp           netnstest.Outcome
				tcpCount, udpCount bool // the reject counter moves
			}{
				{desired.LocalhostOff, netnstest.Refused, netnstest.Refused, false, false},
				{desired.LocalhostReject, netnstest.Refused, netnstest.Refused, true, true},
				{desired.LocalhostProxied, netnstest.OK, netnstest.Refused, false, true},
				// Back to off: the map goes before the chains its
				// elements jump to, or the kernel refuses the cleanup.
				{desired.LocalhostOff, netnstest.Refused, netnstest.Refused, false, false},
			} {
				programNode(t, env, f.Family, tc.mode, st)
				var lp *Proxy
				if tc.mode == desired.LocalhostProxied {
					lp = proxyIn(t, env.Node1.NS, f.Family)
					lp.Observe(withLocalhost(st, tc.mode), model.Changes{})
				}
				before := rejected(t, env, f.Family)
				answer, err := node.Ask(proxy.TCP, spread)
				if got := netnstest.OutcomeOf(err); got != tc.tcp {
					t.Fatalf("mode %d: TCP %s: %s (%v), want %s", tc.mode, spread, got, err, tc.tcp)
				}
				if err == nil && !strings.HasPrefix(answer.Server, "pod-") {
					t.Errorf("mode %d: TCP %s answered by %q, want a pod of the Service", tc.mode, spread, answer.Server)
				}
				_, err = node.Ask(proxy.UDP, netip.AddrPortFrom(lo, 30011))
				if got := netnstest.OutcomeOf(err); got != tc.udp {
					t.Errorf("mode %d: UDP: %s (%v), want %s", tc.mode, got, err, tc.udp)
				}
				after := rejected(t, env, f.Family)
				if moved := after["TCP"] > before["TCP"]; moved != tc.tcpCount {
					t.Errorf("mode %d: TCP reject counter %d → %d", tc.mode, before["TCP"], after["TCP"])
				}
				if moved := after["UDP"] > before["UDP"]; moved != tc.udpCount {
					t.Errorf("mode %d: UDP reject counter %d → %d", tc.mode, before["UDP"], after["UDP"])
				}
				// Only the mode's counters exist: a restart in another
				// mode removed the others from the kernel.
				_, tcpCounter := after["TCP"]
				_, udpCounter := after["UDP"]
				if tcpCounter != (tc.mode == desired.LocalhostReject) || udpCounter != (tc.mode != desired.LocalhostOff) {
					t.Errorf("mode %d: counters %v", tc.mode, after)
				}
				if lp != nil {
					proxiedPolicies(t, node, lo)
					lp.Close()
				}
			}
		})
	}
}

// proxiedPolicies: through the proxy, eTP=Local uses the local endpoint
// only, and a node port without (local) endpoints has no listener.
func proxiedPolicies(t *testing.T, node netnstest.Client, lo netip.Addr) {
	t.Helper()
	seen := scenario.AskMany(t, node, proxy.TCP, netip.AddrPortFrom(lo, 30030), 6)
	if got := scenario.Servers(seen); len(got) != 1 || got[0] != "pod-a" {
		t.Errorf("eTP=Local node port on loopback reached %v, want only pod-a (the local endpoint)", got)
	}
	for _, port := range []uint16{30040, 30050} {
		_, err := node.Ask(proxy.TCP, netip.AddrPortFrom(lo, port))
		if got := netnstest.OutcomeOf(err); got != netnstest.Refused {
			t.Errorf("TCP to loopback:%d (no usable endpoint): %s (%v), want refused", port, got, err)
		}
	}
}

// localhostState is the scenario's Services with nodePortAddresses
// "localhost", computed as the daemon does.
func localhostState(t *testing.T, env *scenario.Env, f scenario.Fam) *desired.State {
	t.Helper()
	w := env.NewWorld(f)
	w.Feed(env.Services()...)
	snap, changes := w.Tracker().Commit()
	opts := w.Options()
	opts.NodePortAddresses = []string{"localhost"}
	opts.Localhost = desired.LocalhostModeProxied
	st := desired.Compute(nil, snap, changes, w.Node(), opts)
	if len(st.NodePorts.IPs) != 0 || st.NodePorts.Localhost != desired.LocalhostProxied {
		t.Fatalf("node ports %+v, want no address and localhost proxied", st.NodePorts)
	}
	return st
}

// withLocalhost is st with the localhost decision replaced by mode: the
// modes desired decides for other configurations, over the same Services.
func withLocalhost(st *desired.State, mode desired.LocalhostNodePorts) *desired.State {
	out := *st
	out.NodePorts.Localhost = mode
	return &out
}

// programNode syncs st into node1's table with a new Proxier in mode (a
// restart over whatever the previous mode left).
func programNode(t *testing.T, env *scenario.Env, family proxy.IPFamily, mode desired.LocalhostNodePorts, st *desired.State) {
	t.Helper()
	err := env.Node1.NS.Do(func() error {
		p, err := nftables.New(family, nftables.Options{})
		if err != nil {
			return err
		}
		return p.Sync(context.Background(), withLocalhost(st, mode), proxy.RecoverySync) // a new Proxier
	})
	if err != nil {
		t.Fatalf("programming node1 (mode %d): %v", mode, err)
	}
}

// proxyIn returns a Proxy whose sockets live in ns: Go runs goroutines on
// threads of the test's own namespace, so each socket is opened inside
// ns.Do (a socket keeps the namespace it was made in).
func proxyIn(t *testing.T, ns *netnstest.NS, family proxy.IPFamily) *Proxy {
	t.Helper()
	p := New(context.Background(), family, Options{})
	p.listen = func(network, address string) (ln net.Listener, err error) {
		err = ns.Do(func() error {
			ln, err = net.Listen(network, address)
			return err
		})
		return ln, err
	}
	p.dial = func(ctx context.Context, network, address string) (c net.Conn, err error) {
		err = ns.Do(func() error {
			d := net.Dialer{Timeout: dialTimeout}
			c, err = d.DialContext(ctx, network, address)
			return err
		})
		return c, err
	}
	t.Cleanup(p.Close)
	return p
}

// rejected reads node1's reject counters of family by protocol.
func rejected(t *testing.T, env *scenario.Env, family proxy.IPFamily) map[string]uint64 {
	t.Helper()
	var got map[string]map[string]uint64
	_ = env.Node1.NS.Do(func() error {
		got = nftables.NewRejectCounters([]proxy.IPFamily{family}).RejectedPackets()
		return nil
	})
	return got[string(family)]
}

func requireKernel(t *testing.T) { t.Helper(); netnstest.RequireKernel(t, "nft") }
