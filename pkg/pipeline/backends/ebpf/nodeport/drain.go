package nodeport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// A flow the programs translated has no state in the kernel's conntrack
// that could carry it on: its packets were rewritten (and, to an endpoint
// on another node, sent out) before netfilter saw them. Detached under it,
// its next packet meets the rules as a connection of their own, which they
// send to an endpoint of their choice from a source of their choice, and
// the endpoint answers it with a reset. So the programs leave a node the
// way a kernel NAT flow outlives the rules that made it: they stop taking
// new flows and keep translating the ones they hold until those are done.

// ctEstablished and ctClosed are bpf/nodeport.c's CT_ESTABLISHED and
// CT_CLOSED.
const (
	ctEstablished = 1
	ctClosed      = 3
)

// DrainTimes bound how long WaitDrained waits for a flow.
type DrainTimes struct {
	// Quiet: a flow that is not an established TCP connection (a
	// handshake, a close, UDP) is done once it had no packet for this
	// long: none is in flight.
	Quiet time.Duration
	// Idle: an established TCP connection is done once it had no packet
	// for this long (a client that went away leaves its entry behind);
	// it is also the longest WaitDrained waits.
	Idle time.Duration
}

// DefaultDrainTimes: a handshake or a close ends within a few round trips;
// an open connection gets two minutes.
var DefaultDrainTimes = DrainTimes{Quiet: 2 * time.Second, Idle: 2 * time.Minute}

// drainPoll is how often WaitDrained reads the tables.
const drainPoll = 200 * time.Millisecond

// BeginDrain makes the programs pinned in dir take no new flow, in either
// family, and returns: from then on a new flow's first packet passes the
// programs as it came and whatever serves the node ports next (another
// mode's rules) takes it, while a packet of a flow np_ct or np_ct6 holds
// is still translated as recorded. It marks the programs draining first
// (markDraining): the rules' masquerade picks ports without seeing the
// tables, and a reply to one of its flows that meets a held flow's reply
// entry is left to the kernel's conntrack, whose flow it is. Then it
// deletes the flows that are done (sweep), before the rules take new
// flows, and every frontend of np_services and np_services6. Beginning
// again changes nothing more (a caller that began early and one that
// removes the programs may both begin); nothing pinned is nothing to do.
// The caller then waits for the flows the programs hold (WaitDrained)
// before it removes them (Remove).
func BeginDrain(dir string, times DrainTimes) error {
	tables, err := openFlowTables(dir)
	if err != nil {
		return err
	}
	defer closeTables(tables)
	if err := errors.Join(markDraining[[4]byte](dir), markDraining[[16]byte](dir)); err != nil {
		return err
	}
	if _, err := sweepAll(tables, times); err != nil {
		return err
	}
	return errors.Join(clearFrontends[[4]byte](dir), clearFrontends[[16]byte](dir))
}

// WaitDrained waits, once BeginDrain has run, until no flow holds the
// programs pinned in dir (DrainTimes), at most times.Idle, deleting the
// flows that are done as they end. It returns how many flows still held
// the programs when it stopped waiting (0 once drained, or with nothing
// pinned). holding, when not nil, is called once with that count before
// the wait.
func WaitDrained(ctx context.Context, dir string, times DrainTimes, holding func(flows int)) (int, error) {
	tables, err := openFlowTables(dir)
	if err != nil {
		return 0, err
	}
	defer closeTables(tables)
	deadline := time.Now().Add(times.Idle)
	for first := true; ; first = false {
		n, err := sweepAll(tables, times)
		if err != nil || n == 0 {
			return n, err
		}
		if first && holding != nil {
			holding(n)
		}
		if time.Now().After(deadline) {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// flowTable is one family's conntrack table, as the drain sweeps it.
type flowTable interface {
	sweep(times DrainTimes) (int, error)
	close()
}

// closeTables closes what openFlowTables opened.
func closeTables(tables []flowTable) {
	for _, t := range tables {
		t.close()
	}
}

type ctTable[A addrBytes] struct{ m *ebpf.Map }

func (t ctTable[A]) sweep(times DrainTimes) (int, error) { return sweep[A](t.m, times) }
func (t ctTable[A]) close()                              { t.m.Close() }

// openFlowTables opens the conntrack tables pinned in dir: none when
// nothing is pinned (an older svcproxy pinned no IPv6 table).
func openFlowTables(dir string) ([]flowTable, error) {
	var tables []flowTable
	for _, open := range []func(string) (flowTable, error){openCT[[4]byte], openCT[[16]byte]} {
		ft, err := open(dir)
		if err != nil {
			closeTables(tables)
			return nil, err
		}
		if ft != nil {
			tables = append(tables, ft)
		}
	}
	return tables, nil
}

func openCT[A addrBytes](dir string) (flowTable, error) {
	m, err := pinnedIn(dir, namesOf[A]().ct)
	if m == nil {
		return nil, err
	}
	return ctTable[A]{m}, nil
}

// sweepAll sweeps every table and counts the flows that still hold the
// programs.
func sweepAll(tables []flowTable, times DrainTimes) (int, error) {
	held := 0
	for _, t := range tables {
		n, err := t.sweep(times)
		if err != nil {
			return 0, err
		}
		held += n
	}
	return held, nil
}

// pinnedIn opens the map name pinned in dir: nil and no error when it is
// not pinned (an older svcproxy pinned no IPv6 maps).
func pinnedIn(dir, name string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinName(name)), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return m, err
}

// markDraining sets cfgDraining in the configuration of A's family pinned
// in dir, before the rules take new flows: from then on the programs
// leave to the stack a reply the kernel's conntrack claims (a new flow the
// rules masqueraded to a port a held flow's reply tuple holds here).
func markDraining[A addrBytes](dir string) error {
	m, err := pinnedIn(dir, namesOf[A]().config)
	if m == nil {
		return err
	}
	defer m.Close()
	var c cfgValOf[A]
	if err := m.Lookup(uint32(0), &c); err != nil {
		return err
	}
	c.Flags |= cfgDraining
	return m.Update(uint32(0), c, ebpf.UpdateExist)
}

// clearFrontends deletes every entry of the frontends map of A's family
// pinned in dir.
func clearFrontends[A addrBytes](dir string) error {
	m, err := pinnedIn(dir, namesOf[A]().services)
	if m == nil {
		return err
	}
	defer m.Close()
	var (
		k    svcKeyOf[A]
		v    svcVal
		keys []svcKeyOf[A]
	)
	for it := m.Iterate(); it.Next(&k, &v); {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// sweep deletes from ct, the conntrack table of A's family, the flows that
// no longer need the programs and counts those that do: a flow needs them
// while one of its directions holds them (holds). An established TCP
// connection idle past Idle holds nothing but stays, for HandOver to give
// the kernel (idleOpen): deleted, its next packet would be reset. A done
// flow goes, so that its entries claim no reply tuple the rules'
// masquerade may give a new connection (the programs, draining, leave
// such a reply to the kernel's conntrack anyway, but only where its
// kfuncs exist). A late packet of a done flow (the last ACK of a close)
// passes to the stack instead, which answers it with a reset at worst.
func sweep[A addrBytes](ct *ebpf.Map, times DrainTimes) (int, error) {
	now, err := monotonicNow()
	if err != nil {
		return 0, err
	}
	var (
		k ctKeyOf[A]
		v ctValOf[A]
	)
	held := map[ctKeyOf[A]]struct{}{}
	it := ct.Iterate()
	for it.Next(&k, &v) {
		if holds(v.State, v.Seen, k.Proto, now, times) {
			held[flowID(k, v)] = struct{}{}
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	var done []ctKeyOf[A]
	for it := ct.Iterate(); it.Next(&k, &v); {
		if _, ok := held[flowID(k, v)]; !ok && !holds(v.State, v.Seen, k.Proto, now, times) && !idleOpen(k.Proto, v.State, v.Seen, now) {
			done = append(done, k)
		}
	}
	for _, k := range done {
		if err := ct.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, err
		}
	}
	return len(held), nil
}

// flowID names the flow of entry k, v by its client's direction: a reply
// entry's rewrite is what the client sent, reversed.
func flowID[A addrBytes](k ctKeyOf[A], v ctValOf[A]) ctKeyOf[A] {
	if v.Reply == 0 {
		return k
	}
	return ctKeyOf[A]{Src: v.Dst, Dst: v.Src, Sport: v.Dport, Dport: v.Sport, Proto: k.Proto}
}

// holds says whether a direction of a flow of protocol proto in state,
// whose last packet was at seen, keeps the programs at now (the
// programs' clock): an established TCP connection that had a packet
// within times.Idle, any other flow but a reset one that had a packet
// within times.Quiet.
func holds(state uint8, seen uint64, proto uint8, now uint64, times DrainTimes) bool {
	if proto == unix.IPPROTO_TCP && state == ctClosed {
		return false
	}
	var age time.Duration
	if now > seen {
		age = time.Duration(now - seen)
	}
	if proto == unix.IPPROTO_TCP && state == ctEstablished {
		return age < times.Idle
	}
	return age < times.Quiet
}

// monotonicNow is the programs' clock (bpf_ktime_get_ns), in nanoseconds.
func monotonicNow() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano()), nil
}

// idleOpen says whether a direction of a flow of protocol proto in state,
// whose last packet was at seen, is an established TCP connection the
// programs still translate at now (bpf/ct.h's timeout), however idle.
func idleOpen(proto, state uint8, seen, now uint64) bool {
	return proto == unix.IPPROTO_TCP && state == ctEstablished && (now < seen || now-seen < uint64(handoverTimeout(proto, state)))
}
