package backends

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelEBPFModeTCOnAndOff: restarts of ebpf mode that turn the tc
// programs on and then off again, while an outside client opens TCP
// connections and sends UDP datagrams to IPv4 and IPv6 node ports back to
// back. Turned on, each family's nftables table the earlier start left
// serves until its first sync has programmed the tc programs, which then
// leaves of it only what keeps the translation of the connections it made
// (nftables.KeepNATHooks: no Service rule); turned off, the tc programs
// serve until both families' first syncs have programmed the tables again,
// and are then drained, taken off the interface and unpinned. Not one
// request fails, not even one in flight while the old path goes or while
// the tc programs are drained (the rules' masquerade then picks ports
// without seeing the programs' table).
func TestKernelEBPFModeTCOnAndOff(t *testing.T) {
	env, cfg, pins := tcModeEnv(t)
	ctx := context.Background()
	f := scenario.Families[0]
	without := *cfg
	without.BPFTCInterfaces = nil
	st := env.NewWorld(f).Configure(func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }).Apply(t, env.Services()...)
	f6 := scenario.Families[1]
	st6 := env.NewWorld(f6).Configure(func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }).Apply(t, env.Services()...)

	rules := openEBPFMode(t, env, &without)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return rules.cleanup(ctx) }) })
	rules.sync(t, env, st, proxy.FullSync)
	rules.sync(t, env, st6, proxy.FullSync)
	if !ipv4Rules(t, env) {
		t.Fatal("no IPv4 nftables rules after a start without the tc programs")
	}
	load := startNodePortLoad(env, f, env.Node1.IPv4)
	load6 := startNodePortLoad(env, f6, env.Node1.IPv6)

	stopEBPFMode(rules)
	withTC := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return withTC.cleanup(ctx) }) })
	if !ipv4Rules(t, env) {
		t.Error("turning the tc programs on removed the IPv4 rules before they synced")
	}
	load.timeRetirement(withTC[proxy.IPv4])
	load6.timeRetirement(withTC[proxy.IPv6])
	withTC.sync(t, env, st, proxy.FullSync)
	withTC.sync(t, env, st6, proxy.FullSync)
	if n := tcPrograms(t, env); n != 2 || ipv4Rules(t, env) {
		t.Errorf("after the first sync with the tc programs: %d on fab0 (want 2), IPv4 rules present: %t (want false)", n, ipv4Rules(t, env))
	}
	noServiceRules(t, env)
	load.settle()

	stopEBPFMode(withTC)
	again := openEBPFMode(t, env, &without)
	if n := tcPrograms(t, env); n != 2 {
		t.Errorf("turning the tc programs off took them off fab0 before the rules synced: %d left, want 2", n)
	}
	load.timeRetirement(again[proxy.IPv4])
	load6.timeRetirement(again[proxy.IPv6])
	again.sync(t, env, st, proxy.FullSync)
	// The drain begins once both families' rules have synced.
	drainFrom := time.Now()
	again.sync(t, env, st6, proxy.FullSync)
	if !ipv4Rules(t, env) {
		t.Error("after the first sync without the tc programs: no IPv4 rules")
	}
	if !familyRules(t, env, proxy.IPv6) {
		t.Error("after the first sync without the tc programs: no IPv6 rules")
	}
	if n, pinned := tcProgramsGone(t, env, filepath.Join(pins, "tc")); n != 0 || pinned {
		t.Errorf("after the first sync without the tc programs and their drain: %d on fab0 (want 0), their pins remain: %t", n, pinned)
	}
	load.drains = append(load.drains, [2]time.Time{drainFrom, time.Now()})
	load6.drains = load.drains
	load.settle()
	load.stop(t)
	load6.stop(t)

	dst := netip.AddrPortFrom(env.Node1.IPv4, 30010)
	for _, ans := range scenario.AskAll(t, env.FromClient(f), proxy.TCP, dst, 4) {
		if ans.Peer.Addr() == f.Pick(env.Allowed) {
			t.Errorf("TCP %s → %s saw the client: the rules masquerade externalTrafficPolicy Cluster", dst, ans.Server)
		}
	}
}

// stopEBPFMode closes what a stopped svcproxy closes: the programs stay
// attached through their pinned links, and the nftables tables stay.
func stopEBPFMode(m modeProxiers) {
	for _, b := range m {
		b.hooks.Close()
		if b.tc != nil {
			b.tc.Close()
		}
	}
}

// tcProgramsGone waits for the tc programs' drain (at least its quiet
// time) and removal after a start without them (off fab0 first, then
// unpinned from dir), and reports how many are left on fab0 and whether
// dir remains.
func tcProgramsGone(t *testing.T, env *scenario.Env, dir string) (int, bool) {
	t.Helper()
	deadline := time.Now().Add(nodeport.DefaultDrainTimes.Quiet + 10*time.Second)
	for {
		n := tcPrograms(t, env)
		_, err := os.Stat(dir)
		pinned := !os.IsNotExist(err)
		if (n == 0 && !pinned) || time.Now().After(deadline) {
			return n, pinned
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodePortLoad asks the scenario's first node ports (TCP 30010, UDP 30011)
// by turns, back to back, from the outside client, until stopped, and
// keeps when each request ran and how it ended.
type nodePortLoad struct {
	mu       sync.Mutex
	requests []loadRequest
	// removals are when the old path was being removed.
	removals [][2]time.Time
	// drains are when the tc programs, turned off, were drained and removed
	// beside the rules.
	drains  [][2]time.Time
	done    chan struct{}
	stopped sync.WaitGroup
}

type loadRequest struct {
	proto      proxy.Protocol
	start, end time.Time
	err        error
}

func startNodePortLoad(env *scenario.Env, f scenario.Fam, node netip.Addr) *nodePortLoad {
	l := &nodePortLoad{done: make(chan struct{})}
	client := env.FromClient(f)
	l.stopped.Add(1)
	go func() {
		defer l.stopped.Done()
		for i := 0; ; i++ {
			select {
			case <-l.done:
				return
			default:
			}
			r := loadRequest{proto: []proxy.Protocol{proxy.TCP, proxy.UDP}[i%2], start: time.Now()}
			_, r.err = client.Ask(r.proto, netip.AddrPortFrom(node, uint16(30010+i%2)))
			r.end = time.Now()
			l.mu.Lock()
			l.requests = append(l.requests, r)
			l.mu.Unlock()
		}
	}()
	return l
}

// timeRetirement records when b's first sync removes the old path.
func (l *nodePortLoad) timeRetirement(b *hooksAndRules) {
	remove := b.retire.remove
	b.retire.remove = func(ctx context.Context) error {
		start := time.Now()
		err := remove(ctx)
		l.mu.Lock()
		l.removals = append(l.removals, [2]time.Time{start, time.Now()})
		l.mu.Unlock()
		return err
	}
}

// settle lets requests run on the new path alone for a while.
func (l *nodePortLoad) settle() { time.Sleep(300 * time.Millisecond) }

// stop ends the load and fails the test for every failed request, saying
// whether it was in flight while the old path was removed or while the tc
// programs were drained.
func (l *nodePortLoad) stop(t *testing.T) {
	t.Helper()
	close(l.done)
	l.stopped.Wait()
	var inFlight, drained, failed int
	for _, r := range l.requests {
		if r.err == nil {
			continue
		}
		failed++
		when := ""
		if overlaps(r, l.removals) {
			inFlight++
			when = ", in flight while the old path was removed"
		}
		if overlaps(r, l.drains) {
			drained++
			when += ", while the tc programs were drained"
		}
		t.Errorf("%s request at %s failed%s: %v", r.proto, r.start.Format("15:04:05.000"), when, r.err)
	}
	if len(l.removals) != 2 {
		t.Errorf("the old path was removed %d times, want twice (once per switch)", len(l.removals))
	}
	t.Logf("%d requests to the node ports across both switches; %d failed, %d of them in flight while the old path was removed, %d while the tc programs were drained",
		len(l.requests), failed, inFlight, drained)
}

// overlaps says whether r ran during one of windows.
func overlaps(r loadRequest, windows [][2]time.Time) bool {
	for _, w := range windows {
		if r.start.Before(w[1]) && r.end.After(w[0]) {
			return true
		}
	}
	return false
}
