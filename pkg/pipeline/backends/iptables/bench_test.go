package iptables

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// discard is an Interface that accepts everything and keeps only the size
// of the last restore, so benchmarks measure our side alone.
type discard struct{ lastRestore int }

func (d *discard) Restore(_ context.Context, data ...[]byte) error {
	d.lastRestore = 0
	for _, c := range data {
		d.lastRestore += len(c)
	}
	return nil
}

// countWriter counts what is written to it.
type countWriter struct{ n *int }

func (c countWriter) Write(p []byte) (int, error) { *c.n += len(p); return len(p), nil }

func (d *discard) RestoreFrom(_ context.Context, write func(io.Writer) error) error {
	d.lastRestore = 0
	return write(countWriter{&d.lastRestore})
}
func (d *discard) Save(context.Context, kiptables.Table) ([]byte, error)      { return nil, nil }
func (d *discard) EnsureChain(context.Context, kiptables.Table, string) error { return nil }
func (d *discard) ChainExists(context.Context, kiptables.Table, string) (bool, error) {
	return true, nil
}
func (d *discard) EnsureRuleAtFront(context.Context, kiptables.Table, string, ...string) error {
	return nil
}
func (d *discard) ListEnsuring(context.Context, []kiptables.ListRequest) (map[kiptables.Table][]byte, error) {
	return nil, nil
}
func (d *discard) MissingChain(context.Context, string, []kiptables.Table) (kiptables.Table, error) {
	return "", nil
}
func (d *discard) DeleteRule(context.Context, kiptables.Table, string, ...string) error { return nil }
func (d *discard) Flavour() kiptables.Flavour                                           { return "" }
func (d *discard) ChainNames(context.Context, kiptables.Table) ([]string, error)        { return nil, nil }

// bigState is services×endpoints ClusterIP services with node ports, the
// shape of upstream's scale tests.
func bigState(services, endpoints int) *desired.State {
	st := &desired.State{Family: proxy.IPv4, NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")},
		NodePorts: desired.NodePortAddrs{All: true},
		Masquerade: desired.Masquerade{Mark: 0x4000, Local: desired.LocalDetector{Mode: desired.LocalCIDR,
			CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}},
		Services: model.PortMap[*desired.ServicePort]{}}
	for i := range services {
		name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: fmt.Sprintf("svc%d", i)},
			Port: "http", Protocol: proxy.TCP}
		var d desired.Dispatch
		for j := range endpoints {
			d.Endpoints = append(d.Endpoints, desired.Endpoint{
				IP: netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(j + 1)}), Port: 8080})
		}
		st.Services = st.Services.With(name, &desired.ServicePort{Name: name, Protocol: proxy.TCP, Port: 80,
			ClusterIP: netip.AddrFrom4([4]byte{172, 30, byte(i >> 8), byte(i)}), NodePort: uint16(30000 + i%2000),
			Internal: d, External: d, Cluster: d})
	}
	return st
}

func BenchmarkFullSync10kx10(b *testing.B) {
	st := bigState(10000, 10)
	ipt := &discard{}
	b.ReportAllocs()
	for b.Loop() {
		p := NewWithInterface(proxy.IPv4, ipt, Options{})
		if err := p.Sync(context.Background(), st, proxytest.ModeOf(st)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(ipt.lastRestore)/1e6, "MB-restore")
}

// BenchmarkFullSyncLiveHeap10kx10 reports the proxy's heap in use at the
// moment a full sync has written its whole input, the top of its memory:
// iptables-restore is still reading, and the store holds the sync's
// record of what changed until it has read all. Cold is the first sync;
// full is a later one, whose table holds every chain already. The State
// is not counted.
func BenchmarkFullSyncLiveHeap10kx10(b *testing.B) {
	st := bigState(10000, 10)
	var cold, full float64
	for b.Loop() {
		base := liveHeap()
		ipt := &heapAtInputEnd{}
		p := NewWithInterface(proxy.IPv4, ipt, Options{})
		if err := p.Sync(context.Background(), st, proxy.RecoverySync); err != nil {
			b.Fatal(err)
		}
		cold = float64(ipt.live-base) / 1e6
		if err := p.Sync(context.Background(), st, proxy.FullSync); err != nil {
			b.Fatal(err)
		}
		full = float64(ipt.live-base) / 1e6
	}
	b.ReportMetric(cold, "MB-live-cold")
	b.ReportMetric(full, "MB-live-full")
}

// heapAtInputEnd is discard that measures the heap in use once a full
// sync's input is all written.
type heapAtInputEnd struct {
	discard
	live uint64
}

func (h *heapAtInputEnd) RestoreFrom(ctx context.Context, write func(io.Writer) error) error {
	err := h.discard.RestoreFrom(ctx, write)
	h.live = liveHeap()
	return err
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRepeatedFullSync10kx10 is the full sync of a running daemon
// (hourly, or after a change of the globals): one Proxier, whose record
// of the kernel is kept from sync to sync.
func BenchmarkRepeatedFullSync10kx10(b *testing.B) {
	st := bigState(10000, 10)
	ipt := &discard{}
	p := NewWithInterface(proxy.IPv4, ipt, Options{})
	if err := p.Sync(context.Background(), st, proxy.RecoverySync); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Sync(context.Background(), st, proxy.FullSync); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(ipt.lastRestore)/1e6, "MB-restore")
}

func BenchmarkPartialSync10kx10(b *testing.B) {
	st := bigState(10000, 10)
	ipt := &discard{}
	p := NewWithInterface(proxy.IPv4, ipt, Options{})
	if err := p.Sync(context.Background(), st, proxytest.ModeOf(st)); err != nil {
		b.Fatal(err)
	}
	var name proxy.ServicePortName
	for name = range st.Services.All() {
		break
	}
	next := *st
	next.Changed = map[proxy.ServicePortName]struct{}{name: {}}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Sync(context.Background(), &next, proxytest.ModeOf(&next)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(ipt.lastRestore)/1e6, "MB-restore")
}
