package ebpf

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// BenchmarkKernelFirstSync is the hooks' first sync of a node that ran no
// svcproxy before, after Prepare (load and attach the programs to a
// throwaway cgroup, which the daemon does while the lists arrive; its time
// is prepare-ms/op): fill the new maps with services cluster IP ports of
// 10 endpoints each, the part of ebpf mode's start after the lists that
// makes ClusterIPs answer a connect. With expected=false Prepare knows no
// size and the sync grows the maps first; with expected=true Prepare
// created them at the State's size (ExpectSize).
// Each round pins into a directory of its own, removed after it.
func BenchmarkKernelFirstSync(b *testing.B) {
	netnstest.RequireKernel(b)
	pins, cgroup := netnstest.MountThrowaway(b, "bpf"), netnstest.ThrowawayCgroup(b, "svcproxy-ebpf-bench")
	for _, tc := range []struct {
		services int
		expected bool
	}{{1000, false}, {1000, true}, {10000, false}, {10000, true}} {
		st := scaleState(tc.services, 10)
		size := proxy.ExpectedSize{ServicePorts: tc.services, EndpointPorts: 10 * tc.services}
		b.Run(fmt.Sprintf("services=%d/expected=%v", tc.services, tc.expected), func(b *testing.B) {
			round, prepare, cpu := 0, time.Duration(0), time.Duration(0)
			for b.Loop() {
				b.StopTimer()
				round++
				dir := filepath.Join(pins, fmt.Sprint(round))
				if err := os.Mkdir(dir, 0o755); err != nil {
					b.Fatal(err)
				}
				p, err := New(proxy.IPv4, Options{PinDir: dir, Cgroup: cgroup})
				if err != nil {
					b.Fatal(err)
				}
				if tc.expected {
					p.ExpectSize(func(context.Context) (proxy.ExpectedSize, bool) { return size, true })
				}
				t0 := time.Now()
				if err := p.Prepare(context.Background()); err != nil {
					b.Fatal(err)
				}
				prepare += time.Since(t0)
				b.StartTimer()
				c0 := cpuTime()
				err = p.Sync(context.Background(), st, proxy.FullSync)
				cpu += cpuTime() - c0
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Cleanup(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(prepare.Milliseconds())/float64(round), "prepare-ms/op")
			// The process's CPU time in the sync, which a busy machine
			// changes less than the time per sync.
			b.ReportMetric(float64(cpu.Milliseconds())/float64(round), "sync-cpu-ms/op")
		})
	}
}

// scaleState is n TCP cluster IP ports of 10.96.0.0/12 with eps endpoints
// each, as the end-to-end benchmark's Services.
func scaleState(n, eps int) *desired.State {
	base := netip.MustParseAddr("10.96.0.1").As4()
	epBase := netip.MustParseAddr("10.128.0.1").As4()
	sps := make([]*desired.ServicePort, 0, n)
	for i := range n {
		vip := addAddr(base, i)
		var ends []proxy.Endpoint
		for j := range eps {
			ends = append(ends, proxy.Endpoint{IP: addAddr(epBase, i*eps+j), Port: 8080})
		}
		sps = append(sps, svc(fmt.Sprintf("s%d", i), proxy.TCP, vip, 80, ends...))
	}
	return stateOf(proxy.IPv4, sps...)
}

func addAddr(a [4]byte, n int) netip.Addr {
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
