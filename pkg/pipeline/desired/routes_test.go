package desired

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestDecideRoutes is the decision table, written out: who is masqueraded
// and which dispatch each source class uses, per path.
func TestDecideRoutes(t *testing.T) {
	cidr := Masquerade{Local: LocalDetector{Mode: LocalCIDR, CIDRs: prefixes("10.0.0.0/16")}}
	none := Masquerade{}
	all := Masquerade{All: true, Local: cidr.Local}
	r := func(set Set, masq bool, why Why) Route { return Route{Set: set, Masquerade: masq, Why: why} }
	for _, tc := range []struct {
		name          string
		m             Masquerade
		externalLocal bool
		// outside, pod, node
		clusterIP, external [numSources]Route
	}{
		{"detector, eTP Cluster", cidr, false,
			[numSources]Route{r(SetInternal, true, WhyNotPod), r(SetInternal, false, WhyClusterIP), r(SetInternal, true, WhyNotPod)},
			[numSources]Route{r(SetExternal, true, WhyExternalCluster), r(SetExternal, true, WhyExternalCluster), r(SetExternal, true, WhyExternalCluster)}},
		{"detector, eTP Local", cidr, true,
			[numSources]Route{r(SetInternal, true, WhyNotPod), r(SetInternal, false, WhyClusterIP), r(SetInternal, true, WhyNotPod)},
			[numSources]Route{r(SetExternal, false, WhyExternalLocal), r(SetCluster, false, WhyPodShortcut), r(SetCluster, true, WhyNodeShortcut)}},
		// Without a detector pods look like anyone else: their routes are
		// FromOutside's, so no renderer needs a pod match.
		{"no detector, eTP Local", none, true,
			[numSources]Route{r(SetInternal, false, WhyClusterIP), r(SetInternal, false, WhyClusterIP), r(SetInternal, false, WhyClusterIP)},
			[numSources]Route{r(SetExternal, false, WhyExternalLocal), r(SetExternal, false, WhyExternalLocal), r(SetCluster, true, WhyNodeShortcut)}},
		{"masqueradeAll", all, false,
			[numSources]Route{r(SetInternal, true, WhyMasqueradeAll), r(SetInternal, true, WhyMasqueradeAll), r(SetInternal, true, WhyMasqueradeAll)},
			[numSources]Route{r(SetExternal, true, WhyExternalCluster), r(SetExternal, true, WhyExternalCluster), r(SetExternal, true, WhyExternalCluster)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideRoutes(tc.m, tc.externalLocal)
			if got[ClusterIPPath] != tc.clusterIP || got[ExternalPath] != tc.external {
				t.Errorf("DecideRoutes = %+v, want cluster IP %+v, external %+v", got, tc.clusterIP, tc.external)
			}
			shared := sharedRoutes(tc.m, tc.externalLocal)
			if *shared != got {
				t.Errorf("sharedRoutes = %+v, want DecideRoutes' %+v", *shared, got)
			}
		})
	}
	// Every detector mode shares the tables of "a detector exists".
	iface := Masquerade{Local: LocalDetector{Mode: LocalInterfacePrefix, Interface: "veth"}}
	if *sharedRoutes(iface, true) != DecideRoutes(iface, true) {
		t.Error("sharedRoutes differs from DecideRoutes for an interface detector")
	}
}

// TestEvaluateOutcome checks what the flow table's Result does not show:
// the route taken, hairpin, and the source-range check of an unknown source.
func TestEvaluateOutcome(t *testing.T) {
	sp := &ServicePort{Name: portName("web", "TCP"), Protocol: "TCP", Port: 80, ClusterIP: netip.MustParseAddr("172.30.0.1"),
		LoadBalancerIPs: addrs("192.0.2.1"), AllowedSources: prefixes("203.0.113.0/24"), ExternalLocal: true,
		Internal: Dispatch{Endpoints: []Endpoint{{IP: netip.MustParseAddr("10.0.1.5"), Port: 8080}}}}
	sp.Cluster, sp.External = sp.Internal, sp.Internal
	st := &State{Family: "IPv4", Masquerade: Masquerade{Local: LocalDetector{Mode: LocalCIDR, CIDRs: prefixes("10.0.0.0/16")}},
		Services: model.NewPortMap(map[proxy.ServicePortName]*ServicePort{sp.Name: sp})}

	hairpin := Evaluate(st, Packet{Source: netip.MustParseAddr("10.0.1.5"), Protocol: "TCP", Dest: sp.ClusterIP, DestPort: 80})
	if hairpin.Verdict != DNAT || !hairpin.Hairpin || !hairpin.Masquerade || hairpin.Route.Masquerade || hairpin.Source != FromPod {
		t.Errorf("hairpin: %+v", hairpin)
	}
	lb := Packet{Protocol: "TCP", Dest: netip.MustParseAddr("192.0.2.1"), DestPort: 80}
	if o := Evaluate(st, lb); o.Firewall != FirewallUnchecked || o.Verdict != DNAT || o.Route.Why != WhyExternalLocal {
		t.Errorf("LB from an unknown source: %+v", o)
	}
	lb.Source = netip.MustParseAddr("198.51.100.9")
	if o := Evaluate(st, lb); o.Firewall != FirewallDenied || o.Verdict != Drop || o.Port != sp {
		t.Errorf("LB from outside the ranges: %+v", o)
	}
	lb.Source, lb.FromNode = netip.MustParseAddr("203.0.113.9"), true
	if o := Evaluate(st, lb); o.Firewall != FirewallAllowed || o.Route.Set != SetCluster || !o.Masquerade || o.Source != FromNode {
		t.Errorf("LB from the node: %+v", o)
	}
}
