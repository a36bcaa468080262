package netnstest

import (
	"bytes"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestCapture: a capture on the client's end of a link records the
// datagram it sends (outgoing, its own Ethernet source) and the server's
// answer (incoming, the server's Ethernet source), with their flows.
func TestCapture(t *testing.T) {
	RequireKernel(t)
	lab := New(t)
	a, err := lab.NewNS("cap-a")
	must(t, err)
	b, err := lab.NewNS("cap-b")
	must(t, err)
	must(t, Veth(a, "a0", b, "b0"))
	ca, cb := netip.MustParseAddr("198.18.7.1"), netip.MustParseAddr("198.18.7.2")
	must(t, a.AddAddr("a0", netip.PrefixFrom(ca, 24)))
	must(t, b.AddAddr("b0", netip.PrefixFrom(cb, 24)))
	_, err = b.Serve("b", proxy.UDP, 8080)
	must(t, err)
	macA, err := a.HardwareAddr("a0")
	must(t, err)
	macB, err := b.HardwareAddr("b0")
	must(t, err)

	c, err := a.Capture("a0")
	must(t, err)
	client := Client{NS: a, SourcePort: 40000}
	if _, err := client.Ask(proxy.UDP, netip.AddrPortFrom(cb, 8080)); err != nil {
		t.Fatal(err)
	}
	must(t, c.Close())
	frames, err := c.Frames()
	must(t, err)
	var sent, answered bool
	for _, f := range frames {
		proto, src, dst, ok := f.Flow()
		if !ok || proto != unix.IPPROTO_UDP {
			continue
		}
		switch {
		case f.Outgoing && src == netip.AddrPortFrom(ca, 40000) && dst == netip.AddrPortFrom(cb, 8080):
			sent = bytes.Equal(f.Source(), macA) && bytes.Equal(f.Destination(), macB)
		case !f.Outgoing && src == netip.AddrPortFrom(cb, 8080) && dst == netip.AddrPortFrom(ca, 40000):
			answered = bytes.Equal(f.Source(), macB) && bytes.Equal(f.Destination(), macA)
		}
	}
	if !sent || !answered {
		t.Errorf("captured %d frames: the datagram sent %t, the answer received %t (each with the right addresses)", len(frames), sent, answered)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
