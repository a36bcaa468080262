package ebpf

import (
	"flag"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// BenchmarkSync measures svcproxy's own share of the socket hooks' syncs
// at 10k ClusterIP Services × 10 endpoints (the end-to-end benchmark's
// shape, test/e2e/bench): render, claims,
// the diff and the bookkeeping, over maps that only count what is written
// (no kernel, so the figures are the Go side alone):
//
//   - cold: a process's first sync, over empty maps: the read-back, a full
//     render, every entry written;
//   - full: a full sync of the same State after it: nothing written;
//   - full-rebuilt: a full sync of an equal State built afresh (as the
//     syncer's full syncs compute it from scratch: equal ports, not the
//     same pointers): nothing written;
//   - partial: a partial sync of one port whose endpoint changed.
//
// cold also reports store-MB, the heap the store keeps after a cold sync.
// Each reports cpu-ms/op, the process's CPU time (GC included) per sync,
// which a busy machine changes less than the time per sync.
func BenchmarkSync(b *testing.B) {
	n := *syncBenchServices
	st := syncBenchState(n)
	moved := movedEndpoint(st)
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			mustSync(b, newBenchMaps(), st, proxy.RecoverySync)
		}
		b.ReportMetric(float64(heapHeldBy(func() any {
			m := newBenchMaps()
			mustSync(b, m, st, proxy.RecoverySync)
			// A record and an any-port record per port, and its ten
			// slots.
			if m.writes != 12*n {
				b.Fatalf("a cold sync wrote %d entries, want %d", m.writes, 12*n)
			}
			return m
		}))/1e6, "store-MB")
	})
	b.Run("full", func(b *testing.B) {
		m := newBenchMaps()
		mustSync(b, m, st, proxy.RecoverySync)
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			mustSync(b, m, st, proxy.FullSync)
		}
	})
	b.Run("full-rebuilt", func(b *testing.B) {
		m := newBenchMaps()
		mustSync(b, m, st, proxy.RecoverySync)
		states, i := [2]*desired.State{syncBenchState(n), st}, 0
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			mustSync(b, m, states[i%2], proxy.FullSync)
			i++
		}
		if m.writes != 12*n {
			b.Fatalf("full syncs of an equal State wrote %d entries after the first sync's %d", m.writes-12*n, 12*n)
		}
	})
	b.Run("partial", func(b *testing.B) {
		m := newBenchMaps()
		mustSync(b, m, st, proxy.RecoverySync)
		b.ReportAllocs()
		states, i := [2]*desired.State{moved, firstChanged(st)}, 0
		for b.Loop() {
			before := m.writes
			mustSync(b, m, states[i%2], proxy.PartialSync)
			if m.writes == before {
				b.Fatal("a partial sync of a moved endpoint wrote nothing")
			}
			i++
		}
	})
}

// syncBenchServices sizes BenchmarkSync: the end-to-end benchmark's 10k by
// default, 100k for the memory target (-sync-services=100000).
var syncBenchServices = flag.Int("sync-services", 10000, "service ports of BenchmarkSync, 10 endpoints each")

// syncBenchState is n TCP service ports, port i at cluster IP
// 172.30.0.0 + i with ten endpoints at 10.i/8 ports 8080-8089.
func syncBenchState(n int) *desired.State {
	sps := make([]*desired.ServicePort, n)
	for i := range sps {
		pod := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		sps[i] = svc(fmt.Sprintf("svc-%d", i), proxy.TCP, netip.AddrFrom4([4]byte{172, byte(30 + i>>16), byte(i >> 8), byte(i)}), 80,
			eps(pod, 8080, 8081, 8082, 8083, 8084, 8085, 8086, 8087, 8088, 8089)...)
	}
	return stateOf(proxy.IPv4, sps...)
}

// movedEndpoint is st with the last endpoint of its first port on another
// port number, that port marked changed.
func movedEndpoint(st *desired.State) *desired.State {
	name, sp := firstPort(st)
	c := *sp
	d := c.Cluster
	d.Endpoints = append([]proxy.Endpoint(nil), d.Endpoints...)
	d.Endpoints[len(d.Endpoints)-1].Port = 9090
	c.Internal, c.External, c.Cluster = d, d, d
	next := *st
	next.Services = st.Services.With(name, &c)
	return firstChanged(&next)
}

// firstChanged is st with its first port marked changed.
func firstChanged(st *desired.State) *desired.State {
	name, _ := firstPort(st)
	next := *st
	next.Changed = map[proxy.ServicePortName]struct{}{name: {}}
	return &next
}

func firstPort(st *desired.State) (proxy.ServicePortName, *desired.ServicePort) {
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "svc-0"}, Protocol: proxy.TCP}
	return name, st.Service(name)
}

// reportCPU starts counting the process's CPU time; the function it
// returns reports it per iteration, as cpu-ms/op. Call it after the
// benchmark's setup.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Milliseconds())/float64(b.N), "cpu-ms/op")
	}
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapHeldBy returns the bytes of heap that what build returns keeps
// alive, a GC before and after.
func heapHeldBy(build func() any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

func mustSync(b *testing.B, m *benchMaps, st *desired.State, mode proxy.SyncMode) {
	if err := m.sync(st, mode); err != nil {
		b.Fatal(err)
	}
}

// countingMap is a map that counts the entries written and deleted and
// holds none: the benchmark's maps start empty, and the store keeps its
// own account of what they hold.
type countingMap[K, V comparable] struct{ n *int }

func (c countingMap[K, V]) Put(keys []K, _ []V) error { *c.n += len(keys); return nil }

func (c countingMap[K, V]) Del(keys []K) error { *c.n += len(keys); return nil }

func (c countingMap[K, V]) dump() (map[K]V, error) { return map[K]V{}, nil }

// benchMaps is one family's bookkeeping of its maps, synced the way
// Proxier.Sync does without loading programs.
type benchMaps struct {
	s      *store
	t      tables
	writes int
}

func newBenchMaps() *benchMaps {
	m := &benchMaps{s: newStore()}
	m.t = tables{services: countingMap[svcKey, svcVal]{&m.writes}, backends: countingMap[beKey, beVal]{&m.writes}}
	return m
}

func (m *benchMaps) sync(st *desired.State, mode proxy.SyncMode) error {
	_, err := trySync(m.s, m.t, st, mode)
	return err
}
