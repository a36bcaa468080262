package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// nullKernel is a knft.Interface that takes every transaction at once and
// keeps nothing: what is left of a sync is svcproxy's own work. It does
// what knft reads of each unit (every object written into a transaction,
// every element change spelled out) and calls Done. The fake kernel
// (knft.NewFake) costs ≈ 14 ms per sync at 10k × 10 by itself, which
// hides the backend's share of a partial sync.
type nullKernel struct{ fake *knftables.Fake }

func newNullKernel() *nullKernel {
	return &nullKernel{fake: knftables.NewFake(knftables.IPv4Family, TableName)}
}

func (k *nullKernel) Exists(context.Context) (bool, error)      { return true, nil }
func (k *nullKernel) ReadBack(context.Context, knft.Sink) error { return nil }
func (k *nullKernel) Delete(context.Context) error              { return nil }
func (k *nullKernel) Close()                                    {}

func (k *nullKernel) Apply(_ context.Context, txs [][]*knft.Unit) (knft.Stats, error) {
	var st knft.Stats
	for _, tx := range txs {
		st.Transactions++
		for _, u := range tx {
			st.Operations += u.Ops
			if u.Objects != nil {
				u.Objects(k.fake.NewTransaction())
			}
			if u.Elems != nil {
				for c := range u.Elems {
					_ = len(c.Key) + len(c.Value)
				}
				st.NetlinkOps += u.Ops
			}
			u.Done()
		}
	}
	return st, nil
}

// withEndpointMoved returns prev with service i's endpoint j%10 replaced
// by a fresh address, Changed naming only that service: one update of
// the end-to-end benchmark's churn (a pod moved; the count unchanged).
func withEndpointMoved(prev *desired.State, i, j int) *desired.State {
	name := benchName(i)
	sp := *prev.Service(name)
	eps := slices.Clone(sp.Internal.Endpoints)
	eps[j%len(eps)] = desired.Endpoint{IP: netip.AddrFrom4([4]byte{10, 245, byte(j >> 8), byte(j)}), Port: 9090}
	d := desired.Dispatch{Endpoints: eps, Empty: desired.Reject}
	sp.Internal, sp.External, sp.Cluster = d, d, d
	next := *prev
	next.Services = prev.Services.With(name, &sp)
	next.Changed = map[proxy.ServicePortName]struct{}{name: {}}
	return &next
}

// BenchmarkPartialSyncGo measures svcproxy's own share of the partial
// sync that follows one endpoint change at 1k, 10k and 50k services × 10
// (render, slots, claims, diff, packing, the store's commit), with nothing
// sent (nullKernel): it should not grow with the table. Run it with a
// fixed count (-benchtime 2000x): each run starts with a cold sync.
// cpu-ns/op is the process's user + system time per sync (getrusage), GC
// included; the kernel's share is test/bench/nftables's (-changes).
func BenchmarkPartialSyncGo(b *testing.B) {
	for _, services := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) { benchmarkPartialSync(b, services) })
	}
}

func benchmarkPartialSync(b *testing.B, services int) {
	st := benchState(services)
	p := NewWithInterface(proxy.IPv4, newNullKernel())
	ctx := context.Background()
	if err := p.Sync(ctx, st, proxy.RecoverySync); err != nil {
		b.Fatal(err)
	}
	states := make([]*desired.State, b.N)
	for k := range states {
		st = withEndpointMoved(st, (k*7919)%services, k)
		states[k] = st
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for k := range b.N {
		if err := p.Sync(ctx, states[k], proxy.PartialSync); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu0)
	if p.last.Operations == 0 {
		b.Fatal("the last sync sent nothing")
	}
}

// cpuTime is the process's user + system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchName is the name of benchState's service i.
func benchName(i int) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "bench", Name: "svc-" + strconv.Itoa(i)}, Port: "http", Protocol: proxy.TCP}
}

// reportCPU reports the process's CPU time per operation since cpu0
// (cpuTime), GC included: on a machine shared with other work it varies
// less than the wall time.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
