package desired

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// With DropUnallocated (nftables mode) a State carries its family's service
// ranges without overlaps (nft refuses overlapping elements of one
// anonymous interval set), on full and incremental computes alike; without
// it, none (iptables and IPVS do not drop them, as upstream's).
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
		for _, drop := range []bool{true, false} {
			opts := Options{Family: family, DropUnallocated: drop}
			full := Compute(nil, nil, model.Changes{}, node, opts)
			next := Compute(full, nil, model.Changes{}, node, opts)
			for _, st := range []*State{full, next} {
				if w := want[family]; drop && !slices.Equal(st.ServiceCIDRs, w) || !drop && st.ServiceCIDRs != nil {
					t.Errorf("%s, DropUnallocated %v: ServiceCIDRs %v, want %v", family, drop, st.ServiceCIDRs, map[bool][]netip.Prefix{true: w}[drop])
				}
			}
		}
	}
	if len(node.ServiceCIDRs) != 5 || node.ServiceCIDRs[0] != netip.MustParsePrefix("10.96.0.0/16") {
		t.Errorf("Compute modified its input: %v", node.ServiceCIDRs)
	}
}
