package nodeport

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Entry is one direction of a flow in the programs' conntrack table, as
// the table holds it.
type Entry struct {
	Proto uint8
	// Src and Dst are the packet's addresses the entry matches; ToSrc
	// and ToDst those it rewrites them to.
	Src, Dst, ToSrc, ToDst netip.AddrPort
	// At and State are bpf/nodeport.c's CT_AT_* and CT_* values.
	At, State uint8
	// Reply: the entry is the flow's reply direction.
	Reply bool
	// Tunnelled: the flow came from a peer node, tunnelled (DSR).
	Tunnelled bool
	// Seen is the programs' clock (CLOCK_MONOTONIC) at the entry's last
	// packet.
	Seen uint64
}

// Entries reads both families' conntrack tables of the programs pinned in
// dir, read-only; nothing where none is pinned. It is what an operator
// would read with bpftool, decoded: for tests and troubleshooting.
func Entries(dir string) ([]Entry, error) {
	var out []Entry
	err := errors.Join(
		eachPinned(dir, maps4.ct, func(k ctKeyOf[[4]byte], v ctValOf[[4]byte]) { out = append(out, entryOf(k, v)) }),
		eachPinned(dir, maps6.ct, func(k ctKeyOf[[16]byte], v ctValOf[[16]byte]) { out = append(out, entryOf(k, v)) }))
	return out, err
}

// Frontends counts the frontends of both families the programs pinned in
// dir serve; 0 where none is pinned, and once a drain has begun.
func Frontends(dir string) (int, error) {
	n := 0
	count := func([]byte, []byte) { n++ }
	err := errors.Join(eachPinned(dir, maps4.services, count), eachPinned(dir, maps6.services, count))
	return n, err
}

func entryOf[A addrBytes](k ctKeyOf[A], v ctValOf[A]) Entry {
	return Entry{
		Proto: k.Proto,
		Src:   addrPort(k.Src, k.Sport), Dst: addrPort(k.Dst, k.Dport),
		ToSrc: addrPort(v.Src, v.Sport), ToDst: addrPort(v.Dst, v.Dport),
		At: v.At, State: v.State, Reply: v.Reply != 0, Tunnelled: v.Flags&ctFlagTunneled != 0, Seen: v.Seen,
	}
}

// String is the entry as an operator reads it: the packets it matches,
// what becomes of them, and the flow's state.
func (e Entry) String() string {
	proto := strconv.Itoa(int(e.Proto))
	switch e.Proto {
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_UDP:
		proto = "udp"
	}
	var what string
	switch e.At {
	case ctAtTunnel:
		// The packet leaves as it came; ToDst is the node the tunnel
		// goes to.
		what = "tunnel to " + e.ToDst.Addr().String()
	case ctAtEgress:
		what = fmt.Sprintf("reply as %v -> %v", e.ToSrc, e.ToDst)
	case ctAtIngressFwd:
		what = fmt.Sprintf("forward as %v -> %v", e.ToSrc, e.ToDst)
	default:
		what = fmt.Sprintf("up the stack as %v -> %v", e.ToSrc, e.ToDst)
	}
	if e.Tunnelled {
		what += ", tunnelled in"
	}
	return fmt.Sprintf("%s %v -> %v: %s (%s)", proto, e.Src, e.Dst, what, stateName(e.State))
}

// stateName names bpf/nodeport.c's CT_* states.
func stateName(state uint8) string {
	switch state {
	case ctNew:
		return "new"
	case ctEstablished:
		return "established"
	case ctClosing:
		return "closing"
	case ctClosed:
		return "closed"
	}
	return "state " + strconv.Itoa(int(state))
}

// eachPinned visits every entry of the map pinned in dir by map's pin
// name, opened read-only.
func eachPinned[K, V any](dir, name string, visit func(K, V)) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinName(name)), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer m.Close()
	var (
		k K
		v V
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		visit(k, v)
	}
	return it.Err()
}
