package nodeport

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// tunnelTable is np_tunnels or np_tunnels6, whose values differ by
// family (tunnelVal, tunnelVal6): the store's tunnelOf, written as the
// family's map holds it.
type tunnelTable[A addrBytes] struct{ m *ebpf.Map }

func (t tunnelTable[A]) Put(keys []A, vals []tunnelOf[A]) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := t.m.BatchUpdate(keys, tunnelWire(vals), nil)
	return err
}

func (t tunnelTable[A]) Del(keys []A) error { return bpfmap.Table[A, tunnelOf[A]]{M: t.m}.Del(keys) }

// tunnelWire is vals as A's family's np_tunnels holds them.
func tunnelWire[A addrBytes](vals []tunnelOf[A]) any {
	switch vs := any(vals).(type) {
	case []tunnelOf[[16]byte]:
		out := make([]tunnelVal6, len(vs))
		for i, v := range vs {
			out[i] = tunnelVal6{Node: v.Node}
		}
		return out
	case []tunnelOf[[4]byte]:
		out := make([]tunnelVal, len(vs))
		for i, v := range vs {
			out[i] = tunnelVal(v)
		}
		return out
	}
	return nil
}

// readTunnels makes A's family's np_tunnels, named name in maps, t's
// kernel side.
func readTunnels[A addrBytes](t *reconcile.Table[whole, A, tunnelOf[A]], maps map[string]*ebpf.Map, name string) error {
	t.ForgetKernel()
	m := maps[name]
	var err error
	switch tt := any(t).(type) {
	case *reconcile.Table[whole, [16]byte, tunnelOf[[16]byte]]:
		err = bpfmap.Table[[16]byte, tunnelVal6]{M: m}.Each(func(k [16]byte, v tunnelVal6) error {
			tt.SetKernel(k, tunnelOf[[16]byte]{Node: v.Node})
			return nil
		})
	case *reconcile.Table[whole, [4]byte, tunnelOf[[4]byte]]:
		err = bpfmap.Table[[4]byte, tunnelVal]{M: m}.Each(func(k [4]byte, v tunnelVal) error {
			tt.SetKernel(k, tunnelOf[[4]byte](v))
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("reading back %s: %w", name, err)
	}
	return nil
}
