package hostile

import (
	"fmt"
	"strings"
	"testing"
)

// Endpoint slices used by the seeds: ready endpoints on this node and
// another, per family (indexes into endpointIPs; node 0 = here, 1 = other).
var (
	v4Slice   = sliceSpec{addrType: 0, endpoints: [][3]int{{0, 0, 0}, {1, 1, 0}}}
	v6Slice   = sliceSpec{addrType: 1, endpoints: [][3]int{{4, 0, 0}, {5, 1, 0}}}
	dualStack = []sliceSpec{v4Slice, v6Slice}
	http80    = [][3]int{{1, 0, 0}} // "http", TCP, 80
	dualIPs   = []int{0, 3}
)

// seed is one committed input and what it must contain, so a change to
// gen that silently shifts the seeds away from their class fails
// TestSeedsCoverTheirClass.
type seed struct {
	class string
	data  []byte
	want  []string // substrings of describe(first batch + second batch)
}

func seedCorpus() []seed {
	lb := func(s svcSpec) svcSpec { s.typ = 2; return s }
	one := func(s svcSpec) []svcSpec { return []svcSpec{s} }
	return []seed{
		{"zoned addresses", program(one(svcSpec{clusterIPs: []int{0, 4}, external: []int{4, 5}, ingress: [][2]int{{4, 1}, {5, 1}},
			typ: 2, ports: http80, slices: []sliceSpec{{endpoints: [][3]int{{6, 0, 0}, {7, 0, 0}, {0, 0, 0}}}, {addrType: 1, endpoints: [][3]int{{6, 0, 0}, {4, 0, 0}}}}}), nil),
			[]string{"%eth0", "flush ruleset", "fe80::1%eth0"}},
		{"leading zeros", program(one(lb(svcSpec{clusterIPs: []int{1}, external: []int{1}, ingress: [][2]int{{1, 1}}, ranges: []int{4, 0},
			ports: http80, slices: []sliceSpec{{endpoints: [][3]int{{2, 0, 0}, {0, 1, 0}}}}})), nil),
			[]string{"172.030.000.010", "198.051.100.001", "203.000.113.000/24", "010.000.001.001"}},
		{"IPv4-mapped", program(one(lb(svcSpec{clusterIPs: []int{2, 3}, external: []int{2, 0}, ingress: [][2]int{{10, 1}, {18, 1}}, ranges: []int{5, 6, 7, 8},
			ports: http80, slices: []sliceSpec{{endpoints: [][3]int{{3, 0, 0}, {0, 0, 0}}}, v6Slice}})), nil),
			[]string{"::ffff:172.30.0.10", "::ffff:198.51.100.1", "::ffff:0:0/96", "::ffff:10.0.1.1"}},
		{"nested and duplicate ranges", program(one(lb(svcSpec{clusterIPs: dualIPs, ingress: [][2]int{{8, 1}, {9, 1}}, ranges: []int{0, 1, 2, 3, 4},
			ports: http80, slices: dualStack})), one(lb(svcSpec{clusterIPs: dualIPs, ingress: [][2]int{{8, 1}, {9, 1}}, ranges: []int{11, 12, 13, 14, 15},
			ports: http80, slices: dualStack}))), []string{"203.0.113.128/25", "2001:db8:1::/48", "192.168.0.0/16"}},
		{"zero and invalid ranges", program(one(lb(svcSpec{clusterIPs: dualIPs, ingress: [][2]int{{8, 1}, {9, 1}}, ranges: []int{9, 0, 10, 11},
			ports: http80, slices: dualStack})), one(lb(svcSpec{clusterIPs: dualIPs, ingress: [][2]int{{8, 1}, {9, 1}}, ranges: []int{16, 17, 18, 19, 21},
			ports: http80, slices: dualStack}))), []string{"0.0.0.0/0", "::/0", "garbage", "fd00::/129"}},
		{"many ports", program(one(lb(svcSpec{clusterIPs: dualIPs, ingress: [][2]int{{8, 1}}, ports: [][3]int{{2, 0, 8}}, huge: 48,
			slices: dualStack})), nil), []string{"p62/TCP:1062"}},
		{"many endpoints", program(one(svcSpec{clusterIPs: dualIPs, affinity: 4, ports: http80,
			slices: []sliceSpec{{endpoints: [][3]int{{0, 0, 0}}, huge: 96}, v6Slice}}),
			one(svcSpec{clusterIPs: dualIPs, affinity: 4, ports: http80,
				slices: []sliceSpec{v4Slice, {addrType: 1, endpoints: [][3]int{{5, 1, 0}}, huge: 96}}})),
			[]string{"10.0.1.127", "fd00:10::2:7f"}},
		{"long names", program(one(lb(svcSpec{ns: 2, name: 1, clusterIPs: dualIPs, ingress: [][2]int{{8, 1}, {9, 1}}, affinity: 2, ranges: []int{0},
			ports: [][3]int{{3, 0, 0}, {3, 1, 0}, {3, 2, 0}}, slices: dualStack})), nil),
			[]string{strings.Repeat("n", 63) + "/" + strings.Repeat("s", 61) + "00", "a-b-c-d-e-f-g-h/SCTP"}},
		{"duplicate ports and odd protocols", program([]svcSpec{
			lb(svcSpec{clusterIPs: dualIPs, ports: [][3]int{{1, 0, 0}, {5, 1, 0}, {5, 0, 1}}, slices: dualStack}),
			lb(svcSpec{clusterIPs: dualIPs, ports: [][3]int{{0, 4, 0}, {0, 3, 3}, {0, 5, 5}}, slices: dualStack}),
			{clusterIPs: dualIPs, ports: [][3]int{{4, 0, 6}, {0, 2, 4}}, slices: dualStack},
			lb(svcSpec{clusterIPs: dualIPs, ports: [][3]int{{1, 0, 0}, {4, 3, 0}}, slices: dualStack}), // one frontend, two names
		}, nil), []string{"http/UDP:80", "http/TCP:443", "/ICMP:", "/tcp:65536", "dns/TCP:-1", "/SCTP:65535", "http/TCP:80 dns/:80"}},
		{"contested frontends", program([]svcSpec{
			lb(svcSpec{other: 1, clusterIPs: dualIPs, external: []int{6, 7, 8}, ingress: [][2]int{{0, 1}, {3, 1}}, ports: http80, slices: dualStack}),
			lb(svcSpec{other: 0, clusterIPs: dualIPs, external: []int{0, 9}, ingress: [][2]int{{8, 1}, {6, 1}}, ports: http80, slices: dualStack}),
			lb(svcSpec{other: 0, clusterIPs: dualIPs, external: []int{11, 12}, ingress: [][2]int{{8, 1}, {9, 0}}, ports: http80, slices: dualStack}),
		}, nil), []string{"ext 172.30.0.11", "lb 198.51.100.1", "lb 172.30.0.10", "ext 192.168.0.2"}},
		{"node addresses and unusable endpoints", program(one(lb(svcSpec{clusterIPs: dualIPs, external: []int{21, 11, 23}, ingress: [][2]int{{22, 1}, {12, 1}},
			ports: http80, slices: []sliceSpec{{endpoints: [][3]int{{16, 0, 0}, {18, 0, 0}, {19, 1, 0}, {0, 0, 0}}},
				{addrType: 1, endpoints: [][3]int{{20, 0, 0}, {21, 0, 0}, {22, 1, 0}, {4, 0, 0}}}}})),
			one(lb(svcSpec{clusterIPs: dualIPs, external: []int{21, 0}, ingress: [][2]int{{22, 1}}, ports: http80,
				slices: []sliceSpec{{endpoints: [][3]int{{15, 0, 0}, {0, 1, 0}}}, v6Slice}}))),
			[]string{"ext 192.168.0.3", "ext ::ffff:192.168.0.3", "lb fd00:1::3", `"224.0.0.1"`, `"255.255.255.255"`, `"169.254.1.3"`,
				`"::1"`, `"ff02::2"`, `"fe80::3"`, `"127.0.0.1"`}},
		{"policies, affinity and node ports, then edited", program(
			one(lb(svcSpec{clusterIPs: dualIPs, etp: 2, itp: 1, affinity: 5, external: []int{0, 3}, ingress: [][2]int{{8, 1}, {9, 1}},
				ranges: []int{14, 15}, ports: [][3]int{{1, 0, 0}, {4, 1, 2}, {0, 2, 7}}, slices: dualStack})),
			[]svcSpec{lb(svcSpec{clusterIPs: dualIPs, etp: 1, affinity: 3, external: []int{3}, ingress: [][2]int{{9, 1}},
				ports: [][3]int{{1, 0, 0}, {4, 1, 2}}, slices: []sliceSpec{{endpoints: [][3]int{{1, 1, 4}}}}}),
				{typ: 3, clusterIPs: []int{6}, ports: http80}}),
			[]string{"eTP Local", "iTP Local", "affinity"}},
		{"headless and unparsable cluster IPs", program([]svcSpec{{clusterIPs: []int{6}, ports: http80, slices: dualStack},
			{clusterIPs: []int{8, 9}, ports: http80}, {clusterIPs: []int{5}, ports: http80}, {typ: 3, clusterIPs: []int{0}, ports: http80}}, nil),
			[]string{"cip None", "cip bogus", "type ExternalName"}},
	}
}

func seeds() [][]byte {
	var out [][]byte
	for _, s := range seedCorpus() {
		out = append(out, s.data)
	}
	return out
}

// TestSeedsCoverTheirClass decodes each seed and checks that it still
// builds the hostile objects it is named for.
func TestSeedsCoverTheirClass(t *testing.T) {
	for _, s := range seedCorpus() {
		g := &gen{data: s.data}
		text := describe(g.world()) + describe(g.world())
		for _, want := range s.want {
			if !strings.Contains(text, want) {
				t.Errorf("seed %q: objects lack %q:\n%s", s.class, want, text)
			}
		}
	}
}

// describe writes the fields the seeds are about, one Service a line.
func describe(w world) string {
	var b strings.Builder
	for _, svc := range w.services {
		fmt.Fprintf(&b, "%s/%s type %s", svc.Namespace, svc.Name, svc.Spec.Type)
		for _, ip := range svc.Spec.ClusterIPs {
			fmt.Fprintf(&b, " cip %s", ip)
		}
		for _, ip := range svc.Spec.ExternalIPs {
			fmt.Fprintf(&b, " ext %s", ip)
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			fmt.Fprintf(&b, " lb %s", ing.IP)
		}
		fmt.Fprintf(&b, " ranges %q", svc.Spec.LoadBalancerSourceRanges)
		if svc.Spec.ExternalTrafficPolicy == "Local" {
			b.WriteString(" eTP Local")
		}
		if p := svc.Spec.InternalTrafficPolicy; p != nil {
			b.WriteString(" iTP " + string(*p))
		}
		if svc.Spec.SessionAffinity == "ClientIP" {
			b.WriteString(" affinity")
		}
		for _, p := range svc.Spec.Ports {
			fmt.Fprintf(&b, " %s/%s:%d", p.Name, p.Protocol, p.Port)
		}
		b.WriteString("\n")
	}
	for _, sl := range w.slices {
		fmt.Fprintf(&b, "slice %s %s:", sl.Name, sl.AddressType)
		for _, ep := range sl.Endpoints {
			fmt.Fprintf(&b, " %q", ep.Addresses)
		}
		b.WriteString("\n")
	}
	return b.String()
}
