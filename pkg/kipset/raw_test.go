package kipset

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// attrs parses a serialized ipset request: netlink header, nfgenmsg, then
// the top-level attributes.
func attrs(t *testing.T, req *nl.NetlinkRequest) (unix.NlMsghdr, map[uint16][]byte) {
	t.Helper()
	b := req.Serialize()
	hdr := unix.NlMsghdr{
		Len:   nl.NativeEndian().Uint32(b[0:4]),
		Type:  nl.NativeEndian().Uint16(b[4:6]),
		Flags: nl.NativeEndian().Uint16(b[6:8]),
	}
	if int(hdr.Len) != len(b) {
		t.Fatalf("length %d in header, %d serialized", hdr.Len, len(b))
	}
	parsed, err := nl.ParseRouteAttr(b[unix.SizeofNlMsghdr+nl.SizeofNfgenmsg:])
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint16][]byte{}
	for _, a := range parsed {
		out[a.Attr.Type] = a.Value
	}
	return hdr, out
}

// The kernel's bitmap:port policy has no protocol: a request carrying
// IPSET_ATTR_PROTO fails on a real kernel ("invalid protocol"), which no
// fake can notice, so the wire form is checked here.
func TestBitmapPortRequestHasNoProtocol(t *testing.T) {
	for _, cmd := range []int{nl.IPSET_CMD_ADD, nl.IPSET_CMD_DEL} {
		hdr, top := attrs(t, bitmapPortRequest(cmd, "KUBE-NODE-PORT-TCP", 30080))
		if want := uint16(cmd | unix.NFNL_SUBSYS_IPSET<<8); hdr.Type != want {
			t.Errorf("type %#x, want %#x", hdr.Type, want)
		}
		if hdr.Flags&unix.NLM_F_EXCL != 0 {
			t.Errorf("%s: NLM_F_EXCL set: a present port would fail to add", cmdName(cmd))
		}
		if hdr.Flags&unix.NLM_F_ACK == 0 {
			t.Errorf("%s: no NLM_F_ACK: errors would go unseen", cmdName(cmd))
		}
		if got := strings.TrimRight(string(top[nl.IPSET_ATTR_SETNAME]), "\x00"); got != "KUBE-NODE-PORT-TCP" {
			t.Errorf("set name %q", got)
		}
		data, ok := top[nl.IPSET_ATTR_DATA|nl.NLA_F_NESTED]
		if !ok {
			t.Fatalf("no nested IPSET_ATTR_DATA in %v", top)
		}
		inner, err := nl.ParseRouteAttr(data)
		if err != nil {
			t.Fatal(err)
		}
		var port []byte
		for _, a := range inner {
			switch a.Attr.Type &^ (nl.NLA_F_NET_BYTEORDER | nl.NLA_F_NESTED) {
			case nl.IPSET_ATTR_PROTO:
				t.Errorf("%s: IPSET_ATTR_PROTO sent for bitmap:port", cmdName(cmd))
			case nl.IPSET_ATTR_PORT:
				if a.Attr.Type&nl.NLA_F_NET_BYTEORDER == 0 {
					t.Errorf("port without NLA_F_NET_BYTEORDER: the kernel refuses it")
				}
				port = a.Value
			}
		}
		if len(port) != 2 || binary.BigEndian.Uint16(port) != 30080 {
			t.Errorf("%s: port attribute %v, want 30080 big-endian", cmdName(cmd), port)
		}
	}
}

// Without NLM_F_EXCL the kernel answers a missing set with success.
func TestDestroyRequestIsExclusive(t *testing.T) {
	hdr, top := attrs(t, destroyRequest("KUBE-LOOP-BACK"))
	if hdr.Flags&unix.NLM_F_EXCL == 0 {
		t.Error("destroy without NLM_F_EXCL: a missing set would not be ErrNotFound")
	}
	if got := strings.TrimRight(string(top[nl.IPSET_ATTR_SETNAME]), "\x00"); got != "KUBE-LOOP-BACK" {
		t.Errorf("set name %q", got)
	}
	if v := top[nl.IPSET_ATTR_PROTOCOL]; len(v) != 1 || v[0] != nl.IPSET_PROTOCOL {
		t.Errorf("protocol version %v", v)
	}
}

func TestBitmapPortTakesAPortOnly(t *testing.T) {
	f := NewFake()
	if err := f.CreateSet(Set{Name: "KUBE-NODE-PORT-TCP", Type: BitmapPort}); err != nil {
		t.Fatal(err)
	}
	bad := []Entry{
		{Protocol: TCP, Port: 30080},
		{IP: netip.MustParseAddr("10.0.0.1"), Port: 30080},
	}
	for _, e := range bad {
		if err := f.AddEntry("KUBE-NODE-PORT-TCP", e); err == nil {
			t.Errorf("Fake took %+v in a bitmap:port set; the kernel refuses it", e)
		}
		if err := validate(BitmapPort, e); err == nil {
			t.Errorf("validate took %+v for bitmap:port", e)
		}
	}
	if err := f.AddEntry("KUBE-NODE-PORT-TCP", Entry{Port: 30080}); err != nil {
		t.Error(err)
	}
}
