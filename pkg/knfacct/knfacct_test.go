package knfacct

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

// reply builds an nfacct answer as the kernel writes it: nfgenmsg, then
// name, packets, bytes and a padding attribute, each 4-byte aligned.
func reply(name string, packets uint64) []byte {
	msg := (&nl.Nfgenmsg{NfgenFamily: 0, Version: nl.NFNETLINK_V0}).Serialize()
	be := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	for _, a := range []*nl.RtAttr{
		nl.NewRtAttr(attrName, nl.ZeroTerminated(name)),
		nl.NewRtAttr(attrPackets, be(packets)),
		nl.NewRtAttr(3, be(packets*100)), // NFACCT_BYTES
		nl.NewRtAttr(7, nil),             // NFACCT_PAD
	} {
		msg = append(msg, a.Serialize()...)
	}
	return msg
}

func TestDecode(t *testing.T) {
	name, packets, err := decode(reply("localhost_nps_accepted_pkts", 1<<40+7))
	if err != nil || name != "localhost_nps_accepted_pkts" || packets != 1<<40+7 {
		t.Errorf("decode = %q, %d, %v", name, packets, err)
	}
	for _, bad := range [][]byte{nil, {0, 0}, reply("x", 1)[:nl.SizeofNfgenmsg]} {
		if _, _, err := decode(bad); err == nil {
			t.Errorf("decode(%x) succeeded", bad)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", strings.Repeat("n", MaxNameLen), "ct_state_invalid_dropped_pkts"} {
		if err := checkName(ok); err != nil {
			t.Errorf("checkName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("n", MaxNameLen+1), "a\x00b"} {
		if err := checkName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("checkName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestFake(t *testing.T) {
	f := NewFake()
	if _, err := f.Get("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before Ensure: %v", err)
	}
	if f.Count("a", 1) {
		t.Error("Count counted into a missing object")
	}
	for range 2 {
		if err := f.Ensure("a"); err != nil {
			t.Fatal(err)
		}
		f.Count("a", 3)
	}
	if n, err := f.Get("a"); n != 6 || err != nil {
		t.Errorf("Get = %d, %v; want 6: Ensure must keep the counts", n, err)
	}
	f.EnsureErr = map[string]error{"b": ErrNotSupported}
	if err := f.Ensure("b"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Ensure(b) = %v", err)
	}
	if _, err := f.Get("b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a failed Ensure created b: %v", err)
	}
}
