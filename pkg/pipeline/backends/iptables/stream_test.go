package iptables

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// writeRecorder is a Fake whose RestoreFrom first hands write a recording
// writer (then, like a retry on the xtables lock, writes the input again
// into the Fake), or fails the writer after failAfter bytes.
type writeRecorder struct {
	*kiptables.Fake
	maxWrite, writes, total int
	failAfter               int    // 0: never
	onWrite                 func() // called before each write is counted
}

var errBrokenPipe = errors.New("injected: broken pipe")

func (r *writeRecorder) Write(p []byte) (int, error) {
	if r.failAfter > 0 && r.total+len(p) > r.failAfter {
		return 0, errBrokenPipe
	}
	if r.onWrite != nil {
		r.onWrite()
	}
	r.writes++
	r.total += len(p)
	r.maxWrite = max(r.maxWrite, len(p))
	return len(p), nil
}

func (r *writeRecorder) RestoreFrom(ctx context.Context, write func(io.Writer) error) error {
	r.maxWrite, r.writes, r.total = 0, 0, 0
	if err := write(r); err != nil {
		return err
	}
	return r.Fake.RestoreFrom(ctx, write)
}

// TestFullSyncStreamsItsInput: a full sync's input reaches the tool in
// pieces of at most a block while it is being rendered (the second block
// arrives before the last port is rendered), not as one buffer; write
// runs twice (a retry) and the tables equal a single run's, with the nat
// section, the large one, before filter.
func TestFullSyncStreamsItsInput(t *testing.T) {
	st := bigState(1000, 10)
	rec := &writeRecorder{Fake: kiptables.NewFake()}
	p := NewWithInterface(proxy.IPv4, rec, Options{})
	renderedAtSecondBlock := -1
	rec.onWrite = func() {
		if rec.total > blockSize && renderedAtSecondBlock < 0 {
			renderedAtSecondBlock = len(p.entries)
		}
	}
	if err := p.Sync(ctx, st, proxytest.ModeOf(st)); err != nil {
		t.Fatal(err)
	}
	if limit := blockSize + 4<<10; rec.maxWrite > limit || rec.total < 10*limit {
		t.Errorf("%d bytes in %d writes, the largest %d: want many writes of at most %d", rec.total, rec.writes, rec.maxWrite, limit)
	}
	if n := st.Services.Len(); renderedAtSecondBlock < 0 || renderedAtSecondBlock >= n {
		t.Errorf("%d of %d ports rendered when the second block was written: the input was not streamed", renderedAtSecondBlock, n)
	}
	fresh, _ := syncFake(t, st, Options{})
	if got, want := rec.Dump(), fresh.Dump(); got != want {
		t.Errorf("after a retried full sync:\n%s", proxytest.LineDiff(want, got))
	}
	input := string(rec.Restores[len(rec.Restores)-1])
	if nat, filter := strings.Index(input, "*nat\n"), strings.Index(input, "*filter\n"); nat < 0 || filter < nat {
		t.Errorf("nat section at %d, filter at %d: want nat first", nat, filter)
	}
}

// TestFullSyncStreamFailure: a tool that stops reading fails the sync, and
// the Proxier, unsure of the kernel, refuses a partial sync next.
func TestFullSyncStreamFailure(t *testing.T) {
	st := bigState(1000, 10)
	rec := &writeRecorder{Fake: kiptables.NewFake(), failAfter: 1 << 20}
	p := NewWithInterface(proxy.IPv4, rec, Options{})
	if err := p.Sync(ctx, st, proxytest.ModeOf(st)); !errors.Is(err, errBrokenPipe) {
		t.Fatalf("Sync = %v, want the writer's error", err)
	}
	next := *st
	next.Changed = map[proxy.ServicePortName]struct{}{}
	if err := p.Sync(ctx, &next, proxy.PartialSync); !errors.Is(err, proxy.ErrFullSyncNeeded) {
		t.Errorf("partial sync after a failed stream: %v, want proxy.ErrFullSyncNeeded", err)
	}
}

// TestServiceGainingEndpointsWritesNATFirst: when a service gains its
// first endpoint, its REJECT goes (filter) and its DNAT comes (nat), in two
// commits. nat first: a connection in between is DNATed (the REJECT only
// matches the cluster IP, which DNAT has rewritten). filter first left the
// cluster IP neither rejected nor DNATed for the nat commit (~0.6 s at 10k
// services): a SYN then left un-NATed and its conntrack entry (120 s,
// SYN_SENT) took every later connection from the same source port with it
// (one cause of "no route to host" in bench-e2e's datapath runs).
func TestServiceGainingEndpointsWritesNATFirst(t *testing.T) {
	name := svcName("ns4", "svc4")
	none := withEndpoints(upstreamState(), name)
	fake, p := syncFake(t, none, Options{})
	next := withEndpoints(none, name, "10.180.0.4:80")
	if err := p.Sync(ctx, next, proxytest.ModeOf(next)); err != nil {
		t.Fatal(err)
	}
	input := string(fake.Restores[len(fake.Restores)-1])
	if nat, filter := strings.Index(input, "*nat\n"), strings.Index(input, "*filter\n"); nat < 0 || filter < nat {
		t.Errorf("nat section at %d, filter at %d: want both, nat first:\n%s", nat, filter, input)
	}
}
