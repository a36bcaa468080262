package nodeport

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestKernelFlowsListAndDelete: a UDP flow the programs translated is
// listed as the conntrack cleanup reads flows (the client's tuple, the
// endpoint answering); it keeps its endpoint after the endpoint left the
// State, until it is deleted, both directions, and counted; the client's
// next datagram from the same port then reaches the current endpoint.
func TestKernelFlowsListAndDelete(t *testing.T) {
	r := newRig(t)
	a, b := r.ep(r.podA), r.ep(r.podB)
	p := r.proxier(t, "np")
	dst := netip.AddrPortFrom(r.node1.IPv4, 30080)
	r.sync(t, p, stateOf(r.node1.IPv4, port("web", proxy.UDP, 30080, a)), proxy.RecoverySync)
	client := r.client
	client.SourcePort = 40123
	ask := func() string {
		t.Helper()
		ans, err := client.Ask(proxy.UDP, dst)
		must(t, err)
		return ans.Server
	}
	if got := ask(); got != "pod-a" {
		t.Fatalf("first datagram answered by %s, want pod-a", got)
	}
	flows := r.list(t, p.Flows())
	want := kconntrack.Flow{Proto: 17,
		Orig:  kconntrack.Tuple{Src: netip.AddrPortFrom(r.clientIP, 40123), Dst: dst},
		Reply: kconntrack.Tuple{Src: a.AddrPort(), Dst: netip.AddrPortFrom(r.clientIP, 40123)}, Replied: true}
	if len(flows) != 1 || flows[0] != want {
		t.Fatalf("flows %v, want [%v]", flows, want)
	}

	r.sync(t, p, stateOf(r.node1.IPv4, port("web", proxy.UDP, 30080, b)), proxy.FullSync)
	if got := ask(); got != "pod-a" {
		t.Errorf("with its entry in place the flow went to %s, want pod-a still (a stale flow)", got)
	}
	var gone int
	must(t, r.node1.NS.Do(func() (err error) {
		gone, err = p.Flows().Delete(context.Background(), proxy.IPv4, flows)
		return err
	}))
	if gone != 1 || ctEntries(t, p) != 0 || p.Flows().Deleted(proxy.IPv4) != 1 {
		t.Errorf("Delete: %d flows gone (%d counted), %d table entries left; want 1 (1) and 0", gone, p.Flows().Deleted(proxy.IPv4), ctEntries(t, p))
	}
	if got := ask(); got != "pod-b" {
		t.Errorf("after the delete the flow went to %s, want pod-b", got)
	}
	if flows := r.list(t, p.Flows()); len(flows) != 1 || flows[0].Reply.Src != b.AddrPort() {
		t.Errorf("flows %v, want one answered by %v", flows, b.AddrPort())
	}
}

func (r *rig) list(t *testing.T, f *Flows) []kconntrack.Flow {
	t.Helper()
	var out []kconntrack.Flow
	must(t, f.List(context.Background(), proxy.IPv4, func(fl kconntrack.Flow) { out = append(out, fl) }))
	return out
}
