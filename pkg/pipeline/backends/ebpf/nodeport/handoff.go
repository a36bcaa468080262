package nodeport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Leaving a node, the programs hand the flows they still hold to the
// kernel's conntrack rather than let them be reset: each one is created
// there with its translation, and netfilter's NAT carries it on as the
// programs did, the node's other rules or none. The wait before it
// (WaitDrained) stays: what ends under the programs needs nothing of the
// kernel, which may refuse a flow (a clash) or, in a family without a nat
// hook, track it untranslated.

// KernelConntrack is what HandOver needs of the kernel's conntrack table
// (kconntrack.Client in the node's network namespace).
type KernelConntrack interface {
	Close() error
	CreateNAT(ctx context.Context, family proxy.IPFamily, flows []kconntrack.NATFlow) ([]kconntrack.Refused, error)
}

// Handover is what HandOver did: the flows now the kernel's, and those it
// refused, which the programs keep until they are removed.
type Handover struct {
	Handed  int
	Refused []kconntrack.Refused
	// Tunnelled counts the direct-server-return flows left to be reset
	// when the programs go: a flow this node tunnels to a peer, and one a
	// peer tunnelled here, need the programs at every packet (the kernel
	// neither encapsulates nor sees the tunnel the client's packets come
	// in), so none is handed over.
	Tunnelled int
}

// HandOver creates in the kernel's conntrack, translated as the programs
// pinned in dir translate them, the flows they hold (DrainTimes) that the
// kernel can carry on, established TCP connections (idle ones too) and
// UDP flows. Each flow the kernel takes leaves the programs' table, so
// that its packets pass them to netfilter from then on. The caller has
// begun the drain (BeginDrain): no new flow comes meanwhile. It opens the
// kernel's table (open) only when it has a flow to hand over. Nothing
// pinned is nothing to hand over.
func HandOver(ctx context.Context, dir string, open func() (KernelConntrack, error), times DrainTimes) (Handover, error) {
	var h Handover
	ct := &lazyConntrack{open: open}
	defer ct.close()
	for _, family := range []proxy.IPFamily{proxy.IPv4, proxy.IPv6} {
		var err error
		if family == proxy.IPv6 {
			err = handOverFamily[[16]byte](ctx, dir, family, ct, times, &h)
		} else {
			err = handOverFamily[[4]byte](ctx, dir, family, ct, times, &h)
		}
		if err != nil {
			return h, err
		}
	}
	return h, nil
}

// handOverFamily hands over the flows of family's table (HandOver).
func handOverFamily[A addrBytes](ctx context.Context, dir string, family proxy.IPFamily, lazy *lazyConntrack, times DrainTimes, h *Handover) error {
	m, err := pinnedIn(dir, namesOf[A]().ct)
	if m == nil {
		return err
	}
	defer m.Close()
	flows, tunnelled, err := handoverFlows[A](m, times)
	h.Tunnelled += tunnelled
	if tunnelled > 0 {
		klog.InfoS("Direct-server-return flows the tc programs hold cannot be handed to the kernel's conntrack; they will be reset",
			"ipFamily", family, "flows", tunnelled)
	}
	if err != nil || len(flows) == 0 {
		return err
	}
	ct, err := lazy.get()
	if err != nil {
		return err
	}
	refused, err := ct.CreateNAT(ctx, family, flows)
	if err != nil {
		return err
	}
	h.Refused = append(h.Refused, refused...)
	kept := map[kconntrack.Tuple]bool{}
	for _, r := range refused {
		kept[r.Flow.Orig] = true
	}
	for _, f := range flows {
		if kept[f.Orig] {
			continue
		}
		if err := forget[A](m, f); err != nil {
			return err
		}
		h.Handed++
	}
	return nil
}

// handoverFlows reads from ct, A's family's table, the flows HandOver
// hands over: those of which a direction holds the programs or is an
// established connection still open (a flow whose endpoint alone sends
// refreshes only its reply entry). It counts apart the tunnelled ones it
// would otherwise hand over (Handover.Tunnelled).
func handoverFlows[A addrBytes](ct *ebpf.Map, times DrainTimes) ([]kconntrack.NATFlow, int, error) {
	now, err := monotonicNow()
	if err != nil {
		return nil, 0, err
	}
	var (
		k ctKeyOf[A]
		v ctValOf[A]
	)
	live := map[ctKeyOf[A]]bool{}
	it := ct.Iterate()
	for it.Next(&k, &v) {
		if holds(v.State, v.Seen, k.Proto, now, times) || idleOpen(k.Proto, v.State, v.Seen, now) {
			live[flowID(k, v)] = true
		}
	}
	if err := it.Err(); err != nil {
		return nil, 0, err
	}
	var flows []kconntrack.NATFlow
	tunnelled := 0
	it = ct.Iterate()
	for it.Next(&k, &v) {
		switch {
		case v.Reply != 0 || v.At == ctAtEgress || !handable(k.Proto, v.State) || !live[k]:
		case v.At == ctAtTunnel || v.Flags&ctFlagTunneled != 0:
			tunnelled++
		default:
			flows = append(flows, natFlowOf(k, v))
		}
	}
	return flows, tunnelled, it.Err()
}

// handable says whether the kernel can carry on a flow of protocol proto
// in state: an established TCP connection (one in a handshake or a
// close would be created in the wrong state), any UDP flow.
func handable(proto, state uint8) bool {
	switch proto {
	case unix.IPPROTO_TCP:
		return state == ctEstablished
	case unix.IPPROTO_UDP:
		return true
	}
	return false
}

// natFlowOf is the translated flow of a client direction's entry.
func natFlowOf[A addrBytes](k ctKeyOf[A], v ctValOf[A]) kconntrack.NATFlow {
	f := kconntrack.NATFlow{
		Proto:   k.Proto,
		Orig:    kconntrack.Tuple{Src: addrPort(k.Src, k.Sport), Dst: addrPort(k.Dst, k.Dport)},
		DNAT:    addrPort(v.Dst, v.Dport),
		Timeout: handoverTimeout(k.Proto, v.State),
	}
	if from := addrPort(v.Src, v.Sport); from != f.Orig.Src {
		f.SNAT = from
	} else {
		// The packets went up the node's stack once the programs
		// rewrote them (a masqueraded flow's leave by the programs, past
		// netfilter): the kernel tracks the flow as the client talking
		// to the endpoint, with the reply tuple the translated one takes.
		f.Replaces = kconntrack.Tuple{Src: f.Orig.Src, Dst: f.DNAT}
	}
	return f
}

// handoverTimeout is how long the kernel keeps a handed over flow without
// a packet: the programs' own timeout of its state (ctTimeout:
// kube-proxy's for an established TCP connection, the kernel's defaults
// for UDP); the flow's next packet sets the node's.
func handoverTimeout(proto, state uint8) time.Duration {
	return time.Duration(ctTimeout(proto, state))
}

// forget deletes both directions of f from ct, A's family's table.
func forget[A addrBytes](ct *ebpf.Map, f kconntrack.NATFlow) error {
	for _, k := range []ctKeyOf[A]{keyOf[A](f.Proto, f.Orig), keyOf[A](f.Proto, f.Reply())} {
		if err := ct.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// lazyConntrack opens the kernel's table at its first use.
type lazyConntrack struct {
	open func() (KernelConntrack, error)
	ct   KernelConntrack
}

func (l *lazyConntrack) get() (KernelConntrack, error) {
	if l.ct != nil {
		return l.ct, nil
	}
	ct, err := l.open()
	if err != nil {
		return nil, fmt.Errorf("the kernel's conntrack: %w", err)
	}
	l.ct = ct
	return ct, nil
}

func (l *lazyConntrack) close() {
	if l.ct != nil {
		_ = l.ct.Close()
	}
}
