package backends

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// tcStatsPin is the tc programs' IPv4 drop counters' pin name under
// pins/tc (nodeport's testdata/pins.txt), read raw: a per-CPU array of
// counters.
const tcStatsPin = "np_stats"

// tcFrontends counts the frontends of both families the tc programs
// pinned under pins hold; none once they are unpinned.
func tcFrontends(pins string) (int, error) { return nodeport.Frontends(filepath.Join(pins, "tc")) }

// tcEntries reads both families' conntrack tables of the tc programs
// pinned under pins, with each entry's age.
func tcEntries(pins string) ([]tcEntry, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil, err
	}
	now := uint64(ts.Nano())
	entries, err := nodeport.Entries(filepath.Join(pins, "tc"))
	out := make([]tcEntry, 0, len(entries))
	for _, e := range entries {
		te := tcEntry{Entry: e}
		if now > e.Seen {
			te.age = time.Duration(now - e.Seen)
		}
		out = append(out, te)
	}
	return out, err
}

// tcEntry is an entry of the tc programs' conntrack table and its age.
type tcEntry struct {
	nodeport.Entry
	age time.Duration
}

// notByTCAfterDrainBegun checks that the tc programs pinned under pins
// translated none of conns, dialed to dst once their drain had begun, and
// that the rules did (notByTC).
func notByTCAfterDrainBegun(t *testing.T, env *scenario.Env, pins string, dst netip.AddrPort, conns []heldConn) {
	t.Helper()
	if held := tcHolds(t, pins, dst, conns); len(held) > 0 {
		t.Errorf("the tc programs translated %d connections to %s dialed after their drain began: %v", len(held), dst, held)
	}
	notByTC(t, env, dst)
}

// tcHolds lists which of conns the tc programs' conntrack table pinned
// under pins holds a flow of (its client's direction: the connection's
// local address to dst).
func tcHolds(t *testing.T, pins string, dst netip.AddrPort, conns []heldConn) []netip.AddrPort {
	t.Helper()
	entries, err := tcEntries(pins)
	if err != nil {
		t.Fatal(err)
	}
	held := map[netip.AddrPort]bool{}
	for _, e := range entries {
		if !e.Reply && e.Dst == dst {
			held[e.Src] = true
		}
	}
	var out []netip.AddrPort
	for _, h := range conns {
		if held[h.conn.LocalAddr()] {
			out = append(out, h.conn.LocalAddr())
		}
	}
	return out
}

// tcDrainReport describes what holds the drain of the tc programs pinned
// under pins: each entry of their conntrack tables (the connection it
// belongs to named by labels, by the client's address), their drop
// counters, and node1's kernel conntrack TCP flows of dst's family (those
// to dst, and any whose masquerade took a port a reply entry of the tc
// programs claims).
func tcDrainReport(env *scenario.Env, pins string, dst netip.AddrPort, labels map[netip.AddrPort]string) string {
	var b strings.Builder
	entries, err := tcEntries(pins)
	fmt.Fprintf(&b, "tc conntrack: %d entries (%v)\n", len(entries), err)
	states := []string{"new", "established", "closing", "closed"}
	for _, e := range entries {
		client := e.Src
		if e.Reply {
			client = e.ToDst
		}
		label := labels[client]
		if label == "" {
			label = "other"
		}
		state := fmt.Sprint(e.State)
		if int(e.State) < len(states) {
			state = states[e.State]
		}
		fmt.Fprintf(&b, "  proto=%d %s>%s rewrites to %s>%s at=%d reply=%t %s seen %v ago [%s]\n",
			e.Proto, e.Src, e.Dst, e.ToSrc, e.ToDst, e.At, e.Reply, state, e.age.Round(time.Millisecond), label)
	}
	for key, name := range []string{"no masquerade port", "reply lost"} {
		perCPU, err := tcStatPerCPU(pins, uint32(key))
		fmt.Fprintf(&b, "tc drops (IPv4), %s, per CPU: %v (%v)\n", name, perCPU, err)
	}
	flows, err := node1Flows(env, dst.Addr().Is6(), func(fl kconntrack.Flow) bool { return fl.Proto == unix.IPPROTO_TCP })
	fmt.Fprintf(&b, "node1's conntrack: %d TCP flows (%v)\n", len(flows), err)
	for _, fl := range flows {
		fmt.Fprintf(&b, "  %s\n", fl)
	}
	return b.String()
}

// connLabels names each connection of sets by its client's address, as
// tcDrainReport shows it.
func connLabels(sets map[string][]heldConn) map[netip.AddrPort]string {
	out := map[netip.AddrPort]string{}
	for name, conns := range sets {
		for _, h := range conns {
			out[h.conn.LocalAddr()] = name
		}
	}
	return out
}

// tcStatPerCPU is the tc programs' IPv4 drop counter key (nodeport's
// stat* constants: bpf/nodeport.c's NP_STAT_*), one count per CPU.
func tcStatPerCPU(pins string, key uint32) ([]uint64, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pins, "tc", tcStatsPin), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var perCPU []uint64
	return perCPU, m.Lookup(key, &perCPU)
}

// tcRemovedAfterClose closes the connections the tc programs hold and
// waits for the removal of ebpf mode's leftovers (removed) to end: a
// quiet time (nodeport.DefaultDrainTimes) after their last packet. It
// allows a minute, less than the drain's idle limit, so that a drain
// that ends only at its limit (a flow still holding it) fails, with
// report's account of what held it.
func tcRemovedAfterClose(t *testing.T, removed <-chan error, held []heldConn, report func() string) {
	t.Helper()
	closeAll(held)
	closed := time.Now()
	select {
	case err := <-removed:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the tc programs removed %v after the connections they held closed", time.Since(closed).Round(time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatalf("ebpf mode's leftovers still there a minute after the connections the tc programs translated closed:\n%s", report())
	}
}
