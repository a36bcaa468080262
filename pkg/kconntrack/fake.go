package kconntrack

import (
	"context"
	"sync"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Fake is an in-memory conntrack table. Its zero value is empty and ready.
type Fake struct {
	mu    sync.Mutex
	flows []Flow

	// ListErr and DeleteErr, when set, are returned by the next calls.
	ListErr   error
	DeleteErr error
	// Lists and Deletes count calls; Deleted records every deleted flow.
	Lists, Deletes int
	Deleted        []Flow
}

var _ Interface = (*Fake)(nil)

// Add inserts flows.
func (f *Fake) Add(flows ...Flow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flows = append(f.flows, flows...)
}

// Flows returns a copy of the table.
func (f *Fake) Flows() []Flow {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Flow(nil), f.flows...)
}

// List is part of Interface.
func (f *Fake) List(ctx context.Context, family proxy.IPFamily, visit func(Flow)) error {
	f.mu.Lock()
	f.Lists++
	flows, err := append([]Flow(nil), f.flows...), f.ListErr
	f.mu.Unlock()
	for _, fl := range flows {
		if family.Contains(fl.Orig.Dst.Addr()) {
			visit(fl)
		}
	}
	return err
}

// Delete is part of Interface.
func (f *Fake) Delete(ctx context.Context, family proxy.IPFamily, flows []Flow) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Deletes++
	if f.DeleteErr != nil {
		return 0, f.DeleteErr
	}
	doomed := make(map[Key]bool, len(flows))
	for _, fl := range flows {
		doomed[fl.Key()] = true
	}
	kept := f.flows[:0]
	for _, fl := range f.flows {
		if doomed[fl.Key()] {
			f.Deleted = append(f.Deleted, fl)
			continue
		}
		kept = append(kept, fl)
	}
	f.flows = kept
	// Flows already gone count as deleted, as with the kernel (ENOENT).
	return len(flows), nil
}
