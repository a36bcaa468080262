package ebpf

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestKernelIPv4MappedFromIPv6Socket: an AF_INET6 socket addressing an
// IPv4 cluster IP as ::ffff:a.b.c.d (a dual-stack application reaching
// an IPv4 Service) reaches its endpoints, with and without the IPv6
// family loaded beside the IPv4 one, and sees the Service as that mapped
// address: getpeername over TCP and connected UDP, the source of the
// replies to datagrams sent with sendto.
func TestKernelIPv4MappedFromIPv6Socket(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.TCP, 8081, "ep1", "ep2")
	r.serve(t, proxy.UDP, 5301, "dns1", "dns2")
	p4 := r.proxier(t, proxy.IPv4)
	sync(t, p4, stateOf(proxy.IPv4,
		svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8081, 8082)...),
		svc("dns", proxy.UDP, vip4, 53, eps(srvIP4, 5301, 5302)...)), proxy.RecoverySync)
	mapped := netip.AddrFrom16(vip4.As16())
	web, dns := netip.AddrPortFrom(mapped, 80), netip.AddrPortFrom(mapped, 53)
	check := func(t *testing.T) {
		for _, c := range []struct {
			how   string
			front netip.AddrPort
		}{{"udp6c", dns}, {"tcp6", web}, {"udp6", dns}} {
			seen := servers(t, r.ask(t, c.how, c.front, 20), c.front)
			t.Logf("%s: 20 tries to %s: %v", c.how, c.front, seen)
			if len(seen) != 2 {
				t.Errorf("%s to %s reached %v, want both endpoints", c.how, c.front, seen)
			}
		}
		if got := r.ask(t, "tcp6", netip.AddrPortFrom(mapped, 81), 1); got[0].Err != "refused" {
			t.Errorf("a port the Service lacks answered %+v over IPv6, want connection refused", got[0])
		}
	}
	t.Run("IPv4Only", check)
	p6 := r.proxier(t, proxy.IPv6)
	sync(t, p6, stateOf(proxy.IPv6, svc("web", proxy.TCP, vip6, 80, eps(srvIP6, 8081)...)), proxy.RecoverySync)
	t.Run("DualStack", check)
}
