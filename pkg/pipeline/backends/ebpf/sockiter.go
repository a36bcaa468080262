package ebpf

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

const (
	progUDPSockets = "udp_sockets"
	mapDoomed      = "doomed"
	// doomedEntries bounds the cookies one run of the iterator destroys.
	doomedEntries = DefaultSocketEntries
)

// iterator is the socket iterator program, loaded over a family's reverse
// translation map. A run sees the sockets of the network namespace it is
// created in.
type iterator struct {
	prog   *ebpf.Program
	doomed *ebpf.Map
	link   *link.Iter
}

func loadIterator(revnat *ebpf.Map) (*iterator, error) {
	spec, err := loadSock()
	if err != nil {
		return nil, err
	}
	spec.Maps[mapRevNAT].MaxEntries = revnat.MaxEntries()
	spec.Maps[mapDoomed].MaxEntries = doomedEntries
	var objs struct {
		Prog   *ebpf.Program `ebpf:"udp_sockets"`
		Doomed *ebpf.Map     `ebpf:"doomed"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{mapRevNAT: revnat}}
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		return nil, fmt.Errorf("loading the socket iterator: %w", err)
	}
	it := &iterator{prog: objs.Prog, doomed: objs.Doomed}
	it.link, err = link.AttachIter(link.IterOptions{Program: objs.Prog})
	if err != nil {
		it.close()
		return nil, fmt.Errorf("attaching the socket iterator: %w", err)
	}
	return it, nil
}

func (it *iterator) close() {
	if it.link != nil {
		it.link.Close()
	}
	it.prog.Close()
	it.doomed.Close()
}

// each runs the iterator in every network namespace of the cgroup's
// processes (only those of only, unless it is nil) and calls fn with each
// record.
func (it *iterator) each(ctx context.Context, cgroup string, only map[netnsID]bool, fn func(netnsID, sockRec)) error {
	spaces, err := netnsOf(cgroup)
	if err != nil {
		return err
	}
	defer spaces.close()
	for id, ns := range spaces {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if only != nil && !only[id] {
			continue
		}
		var out []byte
		err := inNetns(ns, func() error {
			r, err := it.link.Open()
			if err != nil {
				return err
			}
			defer r.Close()
			out, err = io.ReadAll(r)
			return err
		})
		if err != nil {
			return fmt.Errorf("running the socket iterator: %w", err)
		}
		recs := make([]sockRec, len(out)/binary.Size(sockRec{}))
		if err := binary.Read(bytes.NewReader(out), binary.NativeEndian, recs); err != nil {
			return fmt.Errorf("reading the socket iterator: %w", err)
		}
		for _, r := range recs {
			fn(id, r)
		}
	}
	return nil
}

// destroy destroys the sockets of cookies, in the network namespaces
// where, and adds how many went to count.
func (it *iterator) destroy(ctx context.Context, cgroup string, where map[netnsID]bool, cookies []uint64, count *atomic.Uint64) error {
	one := make([]uint8, len(cookies))
	for i := range one {
		one[i] = 1
	}
	if _, err := it.doomed.BatchUpdate(cookies, one, nil); err != nil {
		return fmt.Errorf("naming the sockets to destroy: %w", err)
	}
	err := it.each(ctx, cgroup, where, func(_ netnsID, r sockRec) {
		if r.Destroyed != 0 {
			count.Add(1)
		}
	})
	// Emptied for the next turn; a cookie never names another socket.
	if _, derr := it.doomed.BatchDelete(cookies, nil); derr != nil && err == nil {
		err = fmt.Errorf("emptying the sockets to destroy: %w", derr)
	}
	return err
}
