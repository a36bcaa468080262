package ksysctl

import (
	"fmt"
	"io/fs"
	"sync"
)

// Fake is an in-memory Interface. Values holds the tunables that exist;
// names in ReadOnly refuse writes with ErrNotWritable.
type Fake struct {
	mu       sync.Mutex
	Values   map[string]int
	ReadOnly map[string]bool
	// Writes records every successful write in order, "name=value".
	Writes []string
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake holding values.
func NewFake(values map[string]int) *Fake {
	if values == nil {
		values = map[string]int{}
	}
	return &Fake{Values: values, ReadOnly: map[string]bool{}}
}

// ReadInt is part of Interface.
func (f *Fake) ReadInt(name string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.Values[name]
	if !ok {
		return 0, fmt.Errorf("read %s: %w", name, fs.ErrNotExist)
	}
	return v, nil
}

// WriteInt is part of Interface.
func (f *Fake) WriteInt(name string, value int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ReadOnly[name] {
		return fmt.Errorf("write %s=%d: %w", name, value, ErrNotWritable)
	}
	if _, ok := f.Values[name]; !ok {
		return fmt.Errorf("write %s=%d: %w", name, value, fs.ErrNotExist)
	}
	f.Values[name] = value
	f.Writes = append(f.Writes, fmt.Sprintf("%s=%d", name, value))
	return nil
}
