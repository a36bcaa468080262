package kconntrack_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestCreateNAT creates translated flows in each family, a local
// endpoint's (destination only, TCP; refused while the kernel tracks the
// flow untranslated, unless it replaces that entry) and a masqueraded
// one's (UDP), and reads them back with the reply tuples the translation gives them; a
// flow whose reply tuple an entry holds is refused with EEXIST, the
// others of its batch created.
func TestCreateNAT(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		family                     proxy.IPFamily
		client, other, node        string
		local, remote, masq, masq2 string
	}{
		{proxy.IPv4, "198.19.1.2:40000", "198.19.1.3:40000", "198.19.0.1:30080",
			"10.244.1.5:8080", "10.244.2.5:8080", "198.19.0.1:61000", "198.19.0.1:61001"},
		{proxy.IPv6, "[fd00:19::2]:40000", "[fd00:19::3]:40000", "[fd00:19::1]:30080",
			"[fd00:244:1::5]:8080", "[fd00:244:2::5]:8080", "[fd00:19::1]:61000", "[fd00:19::1]:61001"},
	} {
		t.Run(string(tc.family), func(t *testing.T) {
			local := kconntrack.NATFlow{Proto: kconntrack.ProtoTCP, Orig: kconntrack.Tuple{Src: ap(tc.client), Dst: ap(tc.node)},
				DNAT: ap(tc.local), Timeout: time.Hour}
			masq := kconntrack.NATFlow{Proto: kconntrack.ProtoUDP, Orig: kconntrack.Tuple{Src: ap(tc.client), Dst: ap(tc.node)},
				DNAT: ap(tc.remote), SNAT: ap(tc.masq), Timeout: time.Minute}
			// The kernel tracks the local endpoint's flow untranslated,
			// with the reply tuple the translated one needs: refused,
			// unless it replaces that entry.
			untranslated := flow(kconntrack.ProtoTCP, tc.client, tc.local, tc.local, 0)
			if _, err := c.Create(ctx, tc.family, []kconntrack.Flow{untranslated}, time.Hour); err != nil {
				t.Fatal(err)
			}
			refused, err := c.CreateNAT(ctx, tc.family, []kconntrack.NATFlow{local})
			if err != nil || len(refused) != 1 || refused[0].Err != unix.EEXIST {
				t.Fatalf("a flow clashing with the kernel's untranslated entry: refused %v, %v", refused, err)
			}
			local.Replaces = untranslated.Orig
			refused, err = c.CreateNAT(ctx, tc.family, []kconntrack.NATFlow{local, masq})
			if err != nil || len(refused) != 0 {
				t.Fatalf("create: refused %v, %v", refused, err)
			}
			want := []kconntrack.Flow{local.Flow(), masq.Flow()}
			if want[0].Reply != (kconntrack.Tuple{Src: ap(tc.local), Dst: ap(tc.client)}) ||
				want[1].Reply != (kconntrack.Tuple{Src: ap(tc.remote), Dst: ap(tc.masq)}) {
				t.Fatalf("NATFlow.Reply: %v", want)
			}
			got := list(t, c, tc.family)
			slices.SortFunc(got, func(a, b kconntrack.Flow) int { return int(a.Proto) - int(b.Proto) })
			if !slices.Equal(got, want) {
				t.Fatalf("flows:\n got %v\nwant %v", got, want)
			}
			// Another client's flow masqueraded to the same port of the
			// same endpoint clashes with masq's reply tuple; a third port
			// does not.
			clash := masq
			clash.Orig.Src = ap(tc.other)
			free := clash
			free.SNAT = ap(tc.masq2)
			refused, err = c.CreateNAT(ctx, tc.family, []kconntrack.NATFlow{clash, free})
			if err != nil || len(refused) != 1 || refused[0].Flow != clash || refused[0].Err != unix.EEXIST {
				t.Fatalf("a clash: refused %v, %v", refused, err)
			}
			if got := list(t, c, tc.family); len(got) != 3 {
				t.Fatalf("after a clash: %v", got)
			}
		})
	}
}

// BenchmarkCreateNAT times the handover of natBenchFlows masqueraded TCP
// flows (one CreateNAT call, in batches) into a namespace's table; each
// run's flows are deleted, untimed, before the next.
func BenchmarkCreateNAT(b *testing.B) {
	const natBenchFlows = 10000
	c := newClient(b)
	ctx := context.Background()
	client, node := netip.MustParseAddr("198.19.1.2"), ap("198.19.0.1:30080")
	flows := make([]kconntrack.NATFlow, natBenchFlows)
	doomed := make([]kconntrack.Flow, natBenchFlows)
	for i := range flows {
		src := netip.AddrPortFrom(client, uint16(20000+i))
		flows[i] = kconntrack.NATFlow{Proto: kconntrack.ProtoTCP, Orig: kconntrack.Tuple{Src: src, Dst: node},
			DNAT: ap("10.244.2.5:8080"), SNAT: netip.AddrPortFrom(node.Addr(), uint16(30000+i)), Timeout: time.Hour}
		doomed[i] = flows[i].Flow()
	}
	b.ResetTimer()
	for range b.N {
		if refused, err := c.CreateNAT(ctx, proxy.IPv4, flows); err != nil || len(refused) != 0 {
			b.Fatalf("create: %d refused, %v", len(refused), err)
		}
		b.StopTimer()
		if n, err := c.Delete(ctx, proxy.IPv4, doomed); err != nil || n != len(doomed) {
			b.Fatalf("delete: %d, %v", n, err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*natBenchFlows), "ns/flow")
}
