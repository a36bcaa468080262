package app

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestKernelHostAddrsLeaveOutModesLinks: in a throwaway namespace with a
// node address on eth0 and service IPs on IPVS's dummy link, the host's
// addresses as the daemon lists them (every row's Links left out, in any
// mode) hold the node address and none of the service IPs.
func TestKernelHostAddrsLeaveOutModesLinks(t *testing.T) {
	netnstest.RequireKernel(t, "ip")
	ns, err := netnstest.New(t).NewNS("node")
	if err != nil {
		t.Fatal(err)
	}
	links := backends.Table.Links()
	if len(links) == 0 {
		t.Fatal("no row names a link of its own; IPVS mode's dummy link must be one")
	}
	node, svc := netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("172.30.0.10")
	for _, l := range []struct {
		name string
		addr netip.Addr
	}{{"eth0", node}, {links[0], svc}} {
		// A veth pair: this kernel may lack the dummy link type.
		if _, err := ns.Run(context.Background(), "ip", "link", "add", l.name, "type", "veth", "peer", "name", l.name+"p"); err != nil {
			t.Fatal(err)
		}
		if err := ns.AddAddr(l.name, netip.PrefixFrom(l.addr, 32)); err != nil {
			t.Fatal(err)
		}
	}
	var all, host []netip.Addr
	if err := ns.Do(func() error {
		all, host = interfaceAddrs(nil), interfaceAddrs(links)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(all, svc) {
		t.Fatalf("the namespace's addresses %v lack %s on %s: the test proves nothing", all, svc, links[0])
	}
	if !slices.Contains(host, node) || slices.Contains(host, svc) {
		t.Errorf("host addresses = %v, want %s and not %s (on %s)", host, node, svc, links[0])
	}
}
