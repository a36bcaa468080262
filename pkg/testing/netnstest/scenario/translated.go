package scenario

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// clients are who makes the checks any client of a Service could make:
// the outside client, whose packets the node's rules see, and, when
// node1's pods run in the hooks' cgroup (PodsInCgroup), pod-c, whose
// connections are translated at connect instead.
func (e *Env) clients(f Fam) []netnstest.Client {
	out := []netnstest.Client{e.FromClient(f)}
	if e.podCgroup != "" {
		out = append(out, e.FromPod("pod-c"))
	}
	return out
}

// translates reports whether a request over proto from the named pod is
// translated at connect. The scenario's SCTP client sends from a raw
// socket (netnstest has no SCTP stack), which no socket hook sees: its
// INIT goes through the node's rules like any packet.
func (e *Env) translates(pod string, proto proxy.Protocol) bool {
	return e.Translated(pod) && proto != proxy.SCTP
}

// externalTranslated: pod-c, translated at connect, reaches "spread"
// through node1's node port, its external IP and its LB IP, keeping its
// own source: the connection goes to the endpoint directly, and nothing
// on the way masquerades it (the raw-socket SCTP client's INIT is
// masqueraded by the rules, as any packet to these frontends).
func (e *Env) externalTranslated(t *testing.T, f Fam) {
	self := e.Pods["pod-c"].IP(f.V6)
	for i, proto := range Protocols {
		for _, dst := range []netip.AddrPort{
			netip.AddrPortFrom(e.Node1.IP(f.V6), uint16(30010+i)),
			netip.AddrPortFrom(f.ExternalIP(10), SvcPort),
			netip.AddrPortFrom(f.LBIP(10), SvcPort),
		} {
			ans, err := e.FromPod("pod-c").Ask(proto, dst)
			if err != nil {
				t.Errorf("%s from pod-c to %s: %v", proto, dst, err)
				continue
			}
			if kept := ans.Peer.Addr() == self; kept != e.translates("pod-c", proto) {
				t.Errorf("%s from pod-c to %s reached %s from %s; want pod-c's own address %t",
					proto, dst, ans, self, e.translates("pod-c", proto))
			}
		}
	}
}

// externalLocalTranslated: a pod's connection to an externalTrafficPolicy
// Local node port takes the cluster-wide endpoints with its source kept
// (the short-cut), so it reaches node2's pod-r too, even where node1 has
// no endpoint of its own.
func (e *Env) externalLocalTranslated(t *testing.T, f Fam) {
	self := e.Pods["pod-c"].IP(f.V6)
	for i, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		for _, c := range []struct {
			port uint16
			want []string
		}{{uint16(30030 + i), []string{"pod-a", "pod-r"}}, {uint16(30040 + i), []string{"pod-r"}}} {
			dst := netip.AddrPortFrom(e.Node1.IP(f.V6), c.port)
			seen := map[string]int{}
			for _, ans := range AskAll(t, e.FromPod("pod-c"), proto, dst, 20) {
				seen[ans.Server]++
				if ans.Peer.Addr() != self {
					t.Errorf("%s from pod-c to the eTP=Local node port %s: %v, want pod-c's own address", proto, dst, ans)
				}
			}
			if got := Servers(seen); !slices.Equal(got, c.want) {
				t.Errorf("%s from pod-c to the eTP=Local node port %s reached %v, want %v", proto, dst, got, c.want)
			}
		}
	}
}
