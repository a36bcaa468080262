package nodeport

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The conntrack table's layout, as bpf/nodeport.c declares it.

// ctKeyOf is one direction of a flow as its packets carry it.
type ctKeyOf[A addrBytes] struct {
	Src, Dst     A
	Sport, Dport [2]byte
	Proto        uint8
	Pad          [3]byte
}

// ctValOf is the rewrite of one direction of a flow.
type ctValOf[A addrBytes] struct {
	Src, Dst     A
	Sport, Dport [2]byte
	At           uint8
	State        uint8
	Reply        uint8
	Flags        uint8 // ctFlag*
	Seen         uint64
}

// ctKey and ctVal are IPv4's.
type (
	ctKey = ctKeyOf[[4]byte]
	ctVal = ctValOf[[4]byte]
)

// ctAtEgress, ctAtTunnel and ctNew are bpf/nodeport.c's CT_AT_EGRESS,
// CT_AT_TUNNEL and CT_NEW.
const (
	ctAtEgress = 2
	ctAtTunnel = 3 // CT_AT_TUNNEL: encapsulated to the node in Dst (DSR)
	ctNew      = 0
)

// Flows is the programs' conntrack table (np_ct) as the conntrack cleanup
// reads a flow table: one flow per connection the programs translated, its
// original tuple as the client sent it and its reply tuple as the endpoint
// answers. The cleanup's rule deletes those whose endpoint went away, as it
// deletes the kernel's DNATed flows, so that a UDP client of a removed
// endpoint reaches a current one with its next datagram instead of the
// entry's. It opens the pinned table for each call, so it needs no Proxier
// and never races a sync that loads the programs again.
type Flows struct {
	dir string
	// deleted counts the flows Delete removed, for metrics: IPv4's, IPv6's.
	deleted [2]atomic.Uint64
}

// familyIndex is family's index in per-family arrays.
func familyIndex(family proxy.IPFamily) int {
	if family == proxy.IPv6 {
		return 1
	}
	return 0
}

// Flows is p's conntrack table.
func (p *Proxier) Flows() *Flows { return p.flows }

// Deleted counts the flows of family Delete has removed since the Proxier
// was made: both directions' entries of each, a flow that was already gone
// (expired, evicted) included, as the conntrack cleanup counts the
// kernel's flows.
func (f *Flows) Deleted(family proxy.IPFamily) uint64 { return f.deleted[familyIndex(family)].Load() }

// open is the pinned table of family, nil before the programs' first
// load.
func (f *Flows) open(family proxy.IPFamily) (*ebpf.Map, error) {
	name := maps4.ct
	if family == proxy.IPv6 {
		name = maps6.ct
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(f.dir, pinName(name)), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return m, err
}

// List is part of kconntrack.Interface: it visits each translated flow of
// the family's table once, by its client's direction. A flow tunnelled to
// a peer node (DSR) is not one: its entry names the node, not an
// endpoint, and the cleanup's rule would find every one stale; the sync
// deletes those whose node no longer serves them (deleteTunnelFlows).
func (f *Flows) List(ctx context.Context, family proxy.IPFamily, visit func(kconntrack.Flow)) error {
	m, err := f.open(family)
	if m == nil || err != nil {
		return err
	}
	defer m.Close()
	if family == proxy.IPv6 {
		return listFlows[[16]byte](ctx, m, visit)
	}
	return listFlows[[4]byte](ctx, m, visit)
}

func listFlows[A addrBytes](ctx context.Context, m *ebpf.Map, visit func(kconntrack.Flow)) error {
	var (
		k ctKeyOf[A]
		v ctValOf[A]
	)
	it := m.Iterate()
	for n := 0; it.Next(&k, &v); n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if v.Reply == 0 && v.At != ctAtEgress && v.At != ctAtTunnel {
			visit(flowOf(k, v))
		}
	}
	return it.Err()
}

// Delete is part of kconntrack.Interface: it deletes both directions of
// each flow and counts the flows the table no longer holds.
func (f *Flows) Delete(ctx context.Context, family proxy.IPFamily, flows []kconntrack.Flow) (int, error) {
	m, err := f.open(family)
	if m == nil || err != nil {
		return 0, err
	}
	defer m.Close()
	gone := 0
	defer func() { f.deleted[familyIndex(family)].Add(uint64(gone)) }()
	for _, fl := range flows {
		if err := ctx.Err(); err != nil {
			return gone, err
		}
		orig, reply := flowKeys(family, fl)
		err := m.Delete(orig)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return gone, err
		}
		gone++
		// The reply's entry: the endpoint answering the client, or the
		// masquerade address, as the flow's reply tuple says.
		if err := m.Delete(reply); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return gone, err
		}
	}
	return gone, nil
}

// flowOf is the flow of a client direction's entry: what the client sent
// to, and the endpoint answering the address the packet left with.
func flowOf[A addrBytes](k ctKeyOf[A], v ctValOf[A]) kconntrack.Flow {
	return kconntrack.Flow{
		Proto: k.Proto,
		Orig:  kconntrack.Tuple{Src: addrPort(k.Src, k.Sport), Dst: addrPort(k.Dst, k.Dport)},
		Reply: kconntrack.Tuple{Src: addrPort(v.Dst, v.Dport), Dst: addrPort(v.Src, v.Sport)},
		// Seen a reply: the kernel's state would be past NEW too.
		Replied: v.State != ctNew,
	}
}

// flowKeys are the table keys of fl's directions in family's table: an
// IPv6 flow's addresses have no IPv4 form.
func flowKeys(family proxy.IPFamily, fl kconntrack.Flow) (orig, reply any) {
	if family == proxy.IPv6 {
		return keyOf[[16]byte](fl.Proto, fl.Orig), keyOf[[16]byte](fl.Proto, fl.Reply)
	}
	return keyOf[[4]byte](fl.Proto, fl.Orig), keyOf[[4]byte](fl.Proto, fl.Reply)
}

func keyOf[A addrBytes](proto uint8, t kconntrack.Tuple) ctKeyOf[A] {
	return ctKeyOf[A]{Src: addrOf[A](t.Src.Addr()), Dst: addrOf[A](t.Dst.Addr()), Sport: netPort(t.Src.Port()),
		Dport: netPort(t.Dst.Port()), Proto: proto}
}

func addrPort[A addrBytes](a A, p [2]byte) netip.AddrPort {
	return netip.AddrPortFrom(netipOf(a), binary.BigEndian.Uint16(p[:]))
}

// ctFlagTunneled is bpf/nodeport.c's CT_F_TUNNELED: the flow came
// decapsulated from a peer node (DSR).
const ctFlagTunneled = 1
