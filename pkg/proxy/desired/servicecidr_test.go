package desired

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// A State carries its family's service ranges without overlaps (nft
// refuses overlapping elements of one anonymous interval set), on full and
// incremental computes alike.
func TestServiceCIDRsPerFamily(t *testing.T) {
	node := Node{Name: "n", ServiceCIDRs: []netip.Prefix{
		netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00::/108"),
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.200.0.0/24"),
		netip.MustParsePrefix("192.168.0.0/24"),
	}}
	want := map[proxy.IPFamily][]netip.Prefix{
		proxy.IPv4: {netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/24")},
		proxy.IPv6: {netip.MustParsePrefix("fd00::/108")},
	}
	for _, family := range proxy.Families {
		full := Compute(nil, nil, model.Changes{}, node, Options{Family: family})
		next := Compute(full, nil, model.Changes{}, node, Options{Family: family})
		for _, st := range []*State{full, next} {
			if !slices.Equal(st.ServiceCIDRs, want[family]) {
				t.Errorf("%s: ServiceCIDRs %v, want %v", family, st.ServiceCIDRs, want[family])
			}
		}
	}
	if len(node.ServiceCIDRs) != 5 || node.ServiceCIDRs[0] != netip.MustParsePrefix("10.96.0.0/16") {
		t.Errorf("Compute modified its input: %v", node.ServiceCIDRs)
	}
}
