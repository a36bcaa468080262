package watch

// No informer cache.
//
// A shared informer keeps every object it lists and watches (its indexer),
// queues each one as a delta and buffers a notification per object for
// each handler; the trackers then parse each object into their own model
// and only ever read the namespace and name of the "old" object. At 10k
// Services and slices the objects, queues and buffers were most of the
// process's memory after the first sync. Here the reflector writes into a
// directStore instead, which hands each object to the targets as it
// arrives, parsed (transform.go), and keeps only its key: enough to tell an
// add from an update and to find, at a relist, what was deleted while the
// watch was down.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// directStore is the reflector's store (cache.ReflectorStore): deliver is
// called at once, from the reflector's goroutine, with (nil, obj) for an
// add, (stub, obj) for an update and (obj or stub, nil) for a delete, where
// obj is what transform made of the object and a stub holds only the
// namespace and name of the earlier version.
type directStore struct {
	kind string
	// transform is also the reflector's transform for its temporary store
	// (Transformer), so an object may come already transformed: transform
	// must pass that unchanged.
	transform cache.TransformFunc
	deliver   func(old, cur any)
	stub      func(namespace, name string) any

	mu     sync.Mutex
	keys   map[string]struct{}
	synced chan struct{} // closed by the first Replace, once delivered
	once   sync.Once
}

func newDirectStore(kind string, transform cache.TransformFunc, deliver func(old, cur any), stub func(namespace, name string) any) *directStore {
	return &directStore{kind: kind, transform: transform, deliver: deliver, stub: stub,
		keys: map[string]struct{}{}, synced: make(chan struct{})}
}

// Transformer makes the reflector transform each object as it is decoded
// into the temporary store of a streaming (watch-list) initial list. The
// Service and EndpointSlice lists are not streamed (pagedlist.go); this
// keeps a reflector over any other ListerWatcher (the tests' streamed
// lists) parsing as it goes.
func (s *directStore) Transformer() cache.TransformFunc { return s.transform }

func (s *directStore) Add(obj any) error    { return s.upsert(obj) }
func (s *directStore) Update(obj any) error { return s.upsert(obj) }

func (s *directStore) upsert(obj any) error {
	_, err := s.upsertKey(obj)
	return err
}

// errNoKey wraps the error of an object without a namespace and name.
var errNoKey = errors.New("no key")

// upsertKey delivers obj as an add or an update and returns its key.
func (s *directStore) upsertKey(obj any) (string, error) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return "", fmt.Errorf("%s %w: %w", s.kind, errNoKey, err)
	}
	if obj, err = s.transform(obj); err != nil {
		return "", fmt.Errorf("%s %s: %w", s.kind, key, err)
	}
	s.mu.Lock()
	_, known := s.keys[key]
	s.keys[key] = struct{}{}
	s.mu.Unlock()
	if known {
		s.deliver(s.stubOf(key), obj)
	} else {
		s.deliver(nil, obj)
	}
	return key, nil
}

func (s *directStore) Delete(obj any) error {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj // the last state known: as good as any for a delete
	}
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return fmt.Errorf("%s key: %w", s.kind, err)
	}
	if obj, err = s.transform(obj); err != nil {
		return fmt.Errorf("%s %s: %w", s.kind, key, err)
	}
	s.mu.Lock()
	delete(s.keys, key)
	s.mu.Unlock()
	s.deliver(obj, nil)
	return nil
}

// Replace delivers a (re)list: every listed object, then a delete for each
// key known before and not listed now. The first one marks the store
// synced, after its last delivery.
func (s *directStore) Replace(list []any, _ string) error {
	s.mu.Lock()
	// Only keys known before can be gone: none at the first list, which
	// then needs no set of the listed keys (50k map inserts at 50k slices)
	// and sizes the store's once.
	var listed map[string]struct{}
	if len(s.keys) > 0 {
		listed = make(map[string]struct{}, len(list))
	} else {
		s.keys = make(map[string]struct{}, len(list))
	}
	s.mu.Unlock()
	for _, obj := range list {
		key, err := s.upsertKey(obj)
		if errors.Is(err, errNoKey) {
			klog.InfoS("Ignoring listed object without a key", "kind", s.kind, "err", err)
			continue
		}
		if err != nil {
			return err
		}
		if listed != nil {
			listed[key] = struct{}{}
		}
	}
	var gone []string
	if listed != nil {
		s.mu.Lock()
		for key := range s.keys {
			if _, ok := listed[key]; !ok {
				gone = append(gone, key)
				delete(s.keys, key)
			}
		}
		s.mu.Unlock()
	}
	for _, key := range gone {
		s.deliver(s.stubOf(key), nil)
	}
	s.once.Do(func() { close(s.synced) })
	return nil
}

// Resync does nothing: the trackers would find every object unchanged.
func (s *directStore) Resync() error { return nil }

func (s *directStore) stubOf(key string) any {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not reached: keys come from MetaNamespaceKeyFunc
	}
	return s.stub(ns, name)
}

// waitSynced blocks until the first list was delivered or ctx ended; it
// reports which.
func (s *directStore) waitSynced(ctx context.Context) bool {
	select {
	case <-s.synced:
		return true
	case <-ctx.Done():
		return false
	}
}
