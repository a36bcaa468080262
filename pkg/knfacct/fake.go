package knfacct

import (
	"fmt"
	"sync"
)

// Fake is an in-memory Interface for tests: objects by name with their
// packet counts.
type Fake struct {
	mu      sync.Mutex
	objects map[string]uint64
	// EnsureErr, if set, is what Ensure returns for that name (and the
	// object is not created), as a kernel without the subsystem would.
	EnsureErr map[string]error
	ensures   int
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake with no objects.
func NewFake() *Fake { return &Fake{objects: map[string]uint64{}} }

// Ensure is part of Interface.
func (f *Fake) Ensure(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensures++
	if err := f.EnsureErr[name]; err != nil {
		return fmt.Errorf("creating nfacct object %q: %w", name, err)
	}
	if _, ok := f.objects[name]; !ok {
		f.objects[name] = 0
	}
	return nil
}

// Get is part of Interface.
func (f *Fake) Get(name string) (uint64, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.objects[name]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return n, nil
}

// Count adds packets to the object name, as a matching rule would; it
// reports whether the object exists.
func (f *Fake) Count(name string, packets uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.objects[name]; !ok {
		return false
	}
	f.objects[name] += packets
	return true
}

// Ensures returns how many times Ensure was called.
func (f *Fake) Ensures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ensures
}
