package knft

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// BenchmarkApplyOneElement is an incremental sync's kernel write at its
// smallest: one Apply of one element change (added, then deleted, in
// turn) into a set of a real table, in a test network namespace. Its
// allocs/op and B/op are what every churn sync pays in this package.
func BenchmarkApplyOneElement(b *testing.B) {
	netnstest.RequireKernel(b, "nft")
	ns, err := netnstest.New(b).NewNS("knftbench")
	if err != nil {
		b.Fatal(err)
	}
	const table = "svcproxy-bench"
	err = ns.Do(func() error {
		k, err := New(knftables.IPv4Family, table)
		if err != nil {
			return err
		}
		ctx := context.Background()
		create := &Unit{Objects: func(tx *knftables.Transaction) {
			tx.Add(&knftables.Table{})
			tx.Add(&knftables.Set{Name: "s", Type: "ipv4_addr"})
		}, Ops: 2}
		if _, err := k.Apply(ctx, [][]*Unit{{create}}); err != nil {
			return err
		}
		add := Change{Key: "\x0a\x00\x00\x01", Add: true} // 10.0.0.1, as data
		del := Change{Key: add.Key, Del: true}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			c := add
			if i%2 == 1 {
				c = del
			}
			i++
			u := &Unit{Set: "s", Layout: testLayouts["s"], Ops: 1, Elems: func(yield func(Change) bool) { yield(c) }}
			st, err := k.Apply(ctx, [][]*Unit{{u}})
			if err != nil {
				return err
			}
			if st.NetlinkOps != 1 {
				return fmt.Errorf("the change went through nft, not netlink: %+v", st)
			}
		}
		return k.Delete(ctx)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReadBackElements is a read-back of a table whose set holds
// 10,000 addresses, in a test network namespace: the element dump and
// its decoding, reported to a Sink that keeps nothing.
func BenchmarkReadBackElements(b *testing.B) {
	netnstest.RequireKernel(b, "nft")
	ns, err := netnstest.New(b).NewNS("knftbench")
	if err != nil {
		b.Fatal(err)
	}
	err = ns.Do(func() error {
		k, err := New(knftables.IPv4Family, "svcproxy-bench")
		if err != nil {
			return err
		}
		ctx := context.Background()
		var adds []Change
		for i := range 10000 {
			adds = append(adds, Change{Key: fmt.Sprintf("10.1.%d.%d", i/256, i%256), Add: true})
		}
		if _, err := k.Apply(ctx, [][]*Unit{{createSets}, {elems("s", adds...)}}); err != nil {
			return err
		}
		b.ReportAllocs()
		for b.Loop() {
			var sink countSink
			if err := k.ReadBack(ctx, &sink); err != nil {
				return err
			}
			if sink.n != len(adds) {
				return fmt.Errorf("%d elements read back, want %d", sink.n, len(adds))
			}
		}
		return k.Delete(ctx)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// countSink is a Sink that counts elements and keeps nothing.
type countSink struct{ n int }

func (*countSink) Table()                        {}
func (*countSink) Chain(string, *ChainHook)      {}
func (*countSink) Rule(string, string, []string) {}
func (s *countSink) Set(info SetInfo) (bool, *Layout) {
	if info.Name == "s" {
		s.n = 0 // forget its elements: a set comes again when listed again
	}
	return true, nil
}
func (s *countSink) Element(set string, _, _ []byte) {
	if set == "s" {
		s.n++
	}
}
func (*countSink) SetListed(string) {}
