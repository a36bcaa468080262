package nftables

import (
	"net/netip"
	"slices"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The cluster-ips-check chain drops new connections to addresses of the
// service ranges that no Service holds, as upstream's, and follows the
// ranges as they change, in an otherwise partial sync.
func TestServiceCIDRsDropUnallocated(t *testing.T) {
	st := caseState(t, "externalTrafficPolicy Local with a local endpoint", proxy.IPv4)
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, st)
	reject := "ip daddr @cluster-ips reject"
	if got := chainRules(t, fake, chainClusterIPsCheck); !slices.Equal(got, []string{reject}) {
		t.Fatalf("without service CIDRs: %q, want only the reject", got)
	}
	for _, tc := range []struct {
		cidrs []string
		want  string
	}{
		{[]string{"10.96.0.0/16"}, "ip daddr { 10.96.0.0/16 } drop"},
		{[]string{"10.96.0.0/16", "10.100.0.0/24"}, "ip daddr { 10.96.0.0/16, 10.100.0.0/24 } drop"},
		{nil, ""},
	} {
		next := *st
		next.Changed = map[proxy.ServicePortName]struct{}{}
		next.ServiceCIDRs = nil
		for _, c := range tc.cidrs {
			next.ServiceCIDRs = append(next.ServiceCIDRs, netip.MustParsePrefix(c))
		}
		// A change of ServiceCIDRs is global: the syncer makes it full
		// (desired.State.SameGlobals).
		mustSyncIn(t, p, &next, proxy.FullSync)
		want := []string{reject}
		if tc.want != "" {
			want = append(want, tc.want)
		}
		if got := chainRules(t, fake, chainClusterIPsCheck); !slices.Equal(got, want) {
			t.Errorf("service CIDRs %v: rules %q, want %q", tc.cidrs, got, want)
		}
	}
}

func chainRules(t *testing.T, fake *strictFake, chain string) []string {
	t.Helper()
	ch := fake.Table.Chains[chain]
	if ch == nil {
		t.Fatalf("no chain %s", chain)
	}
	var out []string
	for _, r := range ch.Rules {
		out = append(out, r.Rule)
	}
	return out
}
