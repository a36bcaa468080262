package nodeport

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
)

// TestNATFlowOf: the client direction's entry of a local endpoint's flow
// becomes a flow translated to the endpoint alone, replacing the kernel's
// untranslated entry of it, a masqueraded one's to the endpoint from the
// masquerade address and port; the reply tuple the
// kernel gives each is the key of the flow's reply entry, which HandOver
// deletes with the client's.
func TestNATFlowOf(t *testing.T) {
	ap := netip.MustParseAddrPort
	client, node := ap("198.18.0.100:40000"), ap("198.18.0.11:30010")
	key := keyOf[[4]byte](unix.IPPROTO_TCP, kconntrack.Tuple{Src: client, Dst: node})
	for _, c := range []struct {
		what     string
		from, to netip.AddrPort
		snat     netip.AddrPort
		replaces kconntrack.Tuple
	}{
		{"local endpoint", client, ap("10.244.1.5:8080"), netip.AddrPort{}, kconntrack.Tuple{Src: client, Dst: ap("10.244.1.5:8080")}},
		{"masqueraded", ap("198.18.0.11:61000"), ap("10.244.2.5:8080"), ap("198.18.0.11:61000"), kconntrack.Tuple{}},
	} {
		v := ctVal{Src: addrOf[[4]byte](c.from.Addr()), Dst: addrOf[[4]byte](c.to.Addr()),
			Sport: netPort(c.from.Port()), Dport: netPort(c.to.Port()), State: ctEstablished}
		f := natFlowOf(key, v)
		want := kconntrack.NATFlow{Proto: unix.IPPROTO_TCP, Orig: kconntrack.Tuple{Src: client, Dst: node},
			DNAT: c.to, SNAT: c.snat, Timeout: 24 * time.Hour, Replaces: c.replaces}
		if f != want {
			t.Errorf("%s: %+v, want %+v", c.what, f, want)
		}
		if got, reply := keyOf[[4]byte](f.Proto, f.Reply()), reverseOf(v, key.Proto); got != reply {
			t.Errorf("%s: the kernel's reply tuple %v is not the reply entry's key %v", c.what, got, reply)
		}
	}
}

// TestHandable: what the kernel can carry on, and what stays in the
// programs' table for it however idle: an established TCP connection
// within the programs' own timeout.
func TestHandable(t *testing.T) {
	const closing = 2
	const now = uint64(100 * time.Hour)
	for _, c := range []struct {
		what         string
		proto, state uint8
		seen         uint64
		handable     bool
		idleOpen     bool
	}{
		{"established TCP, idle an hour", unix.IPPROTO_TCP, ctEstablished, now - uint64(time.Hour), true, true},
		{"established TCP, idle past its timeout", unix.IPPROTO_TCP, ctEstablished, now - uint64(25*time.Hour), true, false},
		{"TCP handshake", unix.IPPROTO_TCP, ctNew, now, false, false},
		{"TCP closing", unix.IPPROTO_TCP, closing, now, false, false},
		{"TCP reset", unix.IPPROTO_TCP, ctClosed, now, false, false},
		{"UDP replied", unix.IPPROTO_UDP, ctEstablished, now, true, false},
		{"UDP not replied", unix.IPPROTO_UDP, ctNew, now, true, false},
	} {
		if got := handable(c.proto, c.state); got != c.handable {
			t.Errorf("%s: handable %t, want %t", c.what, got, c.handable)
		}
		if got := idleOpen(c.proto, c.state, c.seen, now); got != c.idleOpen {
			t.Errorf("%s: idleOpen %t, want %t", c.what, got, c.idleOpen)
		}
	}
}
