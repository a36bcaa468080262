package hostile

import (
	"fmt"
	"slices"
)

// svcSpec is the byte program of one Service, field by field in the order
// gen reads them; indexes are into gen's dictionaries (gen_test.go).
type svcSpec struct {
	other, ns, name, typ int
	clusterIPs           []int    // 1 or 2 entries of clusterIPs
	external             []int    // ≤ 3 entries of frontendIPs
	ingress              [][2]int // ≤ 3 × (frontendIPs, ipMode: 0 = Proxy)
	ranges               []int    // ≤ 5 entries of sourceRanges
	etp, itp, affinity   int      // 0: not set; else 1 + the pick32 choice
	ports                [][3]int // name, protocol, port choice (node port choice 0)
	huge                 int      // > 0: 16 + huge-1 ports of the first spec in ports
	slices               []sliceSpec
}

// sliceSpec: address type, endpoints (endpointIPs index, node, conditions).
type sliceSpec struct {
	addrType  int
	endpoints [][3]int
	huge      int // > 0: 32 + huge-1 endpoints like the first
}

func (s svcSpec) bytes(nodePorts bool) []byte {
	if len(s.ports) > 3 || len(s.external) > 3 || len(s.ingress) > 3 || len(s.ranges) > 5 || len(s.slices) > 2 {
		panic(fmt.Sprintf("seed %+v has more than gen reads", s))
	}
	b := []byte{byte(s.other), byte(s.ns), byte(s.name), byte(s.typ), byte(len(s.clusterIPs) - 1)}
	b = appendInts(b, s.clusterIPs)
	b = append(b, byte(len(s.external)))
	b = appendInts(b, s.external)
	b = append(b, byte(len(s.ingress)))
	for _, ing := range s.ingress {
		b = append(b, byte(ing[0]), byte(ing[1]))
	}
	b = append(b, byte(len(s.ranges)))
	b = appendInts(b, s.ranges)
	b = appendChoice(b, s.etp)
	b = append(b, byte(min(s.itp, 1)))
	b = appendChoice(b, s.affinity)
	ports := s.ports
	if s.huge > 0 {
		b = append(b, 0, 7, byte(s.huge-1))
		ports = slices.Repeat(s.ports[:1], 16+s.huge-1)
	} else {
		b = append(b, byte(len(s.ports)), 0)
	}
	for _, p := range ports {
		b = append(b, byte(p[0]), byte(p[1]), byte(p[2]))
		if nodePorts {
			b = append(b, 0)
		}
	}
	b = append(b, byte(len(s.slices)))
	for _, sl := range s.slices {
		b = append(b, sl.bytes(len(ports))...)
	}
	return b
}

func (sl sliceSpec) bytes(ports int) []byte {
	if len(sl.endpoints) > 4 {
		panic(fmt.Sprintf("slice %+v has more endpoints than gen reads", sl))
	}
	b := []byte{byte(sl.addrType)}
	for range ports {
		b = append(b, 1, 0) // every port, target 8080+j
	}
	eps := sl.endpoints
	if sl.huge > 0 {
		b = append(b, 0, 7, byte(sl.huge-1))
		eps = slices.Repeat(sl.endpoints[:1], 32+sl.huge-1)
	} else {
		b = append(b, byte(len(eps)), 0)
	}
	for _, e := range eps {
		b = append(b, byte(e[0]), byte(e[1]), byte(e[2]), 1) // no zone
	}
	return b
}

// appendChoice encodes an optional choice: 0 = no, else yes and c-1.
func appendChoice(b []byte, c int) []byte {
	if c == 0 {
		return append(b, 0)
	}
	return append(b, 1, byte(c-1))
}

func appendInts(b []byte, xs []int) []byte {
	for _, x := range xs {
		b = append(b, byte(x))
	}
	return b
}

// program is a whole input: Services of the first batch, then the second.
func program(first, second []svcSpec) []byte {
	var b []byte
	for _, batch := range [][]svcSpec{first, second} {
		huge := 0
		for _, s := range batch {
			huge += min(s.huge, 1)
			for _, sl := range s.slices {
				huge += min(sl.huge, 1)
			}
		}
		if huge > 1 {
			panic("gen allows many ports or many endpoints once per batch")
		}
		b = append(b, byte(len(batch)-1))
		for _, s := range batch {
			b = append(b, s.bytes(s.typ == 1 || s.typ == 2 || s.typ == 4)...)
		}
	}
	return b
}
