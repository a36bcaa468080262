package nftables

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// benchState is n services × 10 endpoints, each with a cluster IP and a
// node port: the shape of test/bench/nftables, without the kernel. Its
// endpoint addresses repeat after 65,536 (sharedEndpoint: at 10k × 10 a
// third of the hairpin elements have two claims).
func benchState(n int) *desired.State { return benchStateOf(n, sharedEndpoint) }

// sharedEndpoint is endpoint v of benchState: 10.244.0.0/16, the port
// telling the rounds apart.
func sharedEndpoint(v int) desired.Endpoint {
	return desired.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(v >> 8), byte(v)}), Port: uint16(8080 + v>>16)}
}

// uniqueEndpoint gives every endpoint an address of its own, as
// test/bench/nftables and the end-to-end benchmark do (198.18.0.0/15).
func uniqueEndpoint(v int) desired.Endpoint {
	return desired.Endpoint{IP: netip.AddrFrom4([4]byte{198, 18 + byte(v>>16), byte(v >> 8), byte(v)}), Port: 8080}
}

// benchStateOf is benchState with endpoint v (service i's j-th: v = 10i
// + j) at endpoint(v).
func benchStateOf(n int, endpoint func(v int) desired.Endpoint) *desired.State {
	st := &desired.State{
		Family:    proxy.IPv4,
		NodeIPs:   []netip.Addr{netip.MustParseAddr("10.0.0.1")},
		NodePorts: desired.NodePortAddrs{All: true},
		Masquerade: desired.Masquerade{Mark: 1 << 14,
			Local: desired.LocalDetector{Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}},
		Services: model.PortMap[*desired.ServicePort]{},
	}
	for i := range n {
		eps := make([]desired.Endpoint, 10)
		for j := range eps {
			eps[j] = endpoint(i*10 + j)
		}
		d := desired.Dispatch{Endpoints: eps, Empty: desired.Reject}
		name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)}, Port: "http", Protocol: proxy.TCP}
		st.Services = st.Services.With(name, &desired.ServicePort{Name: name, Protocol: proxy.TCP, Port: 80,
			ClusterIP: netip.AddrFrom4([4]byte{172, 30, byte(i >> 8), byte(i)}), NodePort: uint16(10000 + i%50000),
			Internal: d, External: d, Cluster: d})
	}
	return st
}

// BenchmarkColdSyncGo measures svcproxy's own share of a cold sync at
// 10k × 10: render, claim, diff and the store's commit bookkeeping. The
// kernel's share is measured by test/bench/nftables.
func BenchmarkColdSyncGo(b *testing.B) {
	st := benchState(10000)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		coldSync(st, func(u *knft.Unit) { u.Done() })
	}
	reportCPU(b, cpu0)
}

// BenchmarkColdSyncGoChanges is BenchmarkColdSyncGo plus what knft reads
// of each element unit before encoding it: every change, with its key
// and value spelled out (slot groups spell their elements' keys here).
func BenchmarkColdSyncGoChanges(b *testing.B) {
	st := benchState(10000)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		n := 0
		coldSync(st, func(u *knft.Unit) {
			if u.Elems != nil {
				for c := range u.Elems {
					n += len(c.Key) + len(c.Value)
				}
			}
			u.Done()
		})
		if n == 0 {
			b.Fatal("no element changes")
		}
	}
	reportCPU(b, cpu0)
}

// BenchmarkRestartGo measures svcproxy's own share of a restart at 10k ×
// 10: the read-back into a new store (readBackFrom: the elements as knft's
// decoder hands them over, without the kernel's dump), then the full sync
// that finds nothing to change.
func BenchmarkRestartGo(b *testing.B) {
	st := benchState(10000)
	old := coldSync(st, func(u *knft.Unit) { u.Done() })
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		s := readBackFrom(old)
		(&Proxier{store: s}).fullClaims(st, newConfig(st))
		if units := s.diff(); len(units) != 0 {
			b.Fatalf("a restart with nothing changed sends %d units", len(units))
		}
		s.clearDirty()
	}
	reportCPU(b, cpu0)
}

// coldSync syncs st into a new store with a table and no kernel: each
// unit goes to commit, in order.
func coldSync(st *desired.State, commit func(*knft.Unit)) *store {
	s := newStore()
	s.tablePresent = true
	(&Proxier{store: s}).fullClaims(st, newConfig(st))
	for _, u := range s.diff() {
		commit(u.kernelUnit())
	}
	s.clearDirty()
	return s
}
