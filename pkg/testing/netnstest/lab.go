// Package netnstest builds small network topologies out of throwaway network
// namespaces for kernel and end-to-end tests: namespaces, veth pairs,
// addresses, routes between test namespaces, sysctls, and echo servers and
// clients that run inside them.
//
// Safety: everything this package programs lives in namespaces it created
// itself, and it refuses addresses and routes outside the reserved test
// ranges (see AllowedPrefixes), so no test namespace ever gets a route off
// the machine. A Lab deletes every namespace it made when it is closed; New
// registers that with t.Cleanup so it also happens when a test fails.
package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NamePrefix starts the name of every namespace this package creates, so a
// leftover from a crashed run is easy to recognize (ip netns list).
const NamePrefix = "svcp-"

// Lab owns a set of namespaces and removes them all on Close.
type Lab struct {
	id string

	mu         sync.Mutex
	namespaces []*NS
	closers    []func()
}

// NS is one network namespace created by a Lab.
type NS struct {
	// Name is the namespace's name under /var/run/netns.
	Name string
	// Role is the short name the test gave it ("node", "pod-a", ...).
	Role string

	handle netns.NsHandle
	nl     *netlink.Handle
	lab    *Lab

	childMu  sync.Mutex
	children map[string]*child // by cgroup: see Client.Cgroup
}

// New returns a Lab whose namespaces are deleted when t and its subtests end,
// whether the test passed or not.
func New(t testing.TB) *Lab {
	t.Helper()
	lab, err := NewLab()
	if err != nil {
		t.Fatalf("netnstest: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("netnstest cleanup: %v", err)
		}
	})
	return lab
}

// NewLab returns a Lab for callers without a testing.TB (benchmarks); the
// caller must Close it.
func NewLab() (*Lab, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("random lab id: %w", err)
	}
	return &Lab{id: hex.EncodeToString(b[:])}, nil
}

// NewNS creates a namespace named svcp-<lab id>-<role> with its loopback up.
func (l *Lab) NewNS(role string) (*NS, error) {
	name := NamePrefix + l.id + "-" + role
	handle, err := createNamed(name)
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	ns := &NS{Name: name, Role: role, handle: handle, lab: l}
	l.mu.Lock()
	l.namespaces = append(l.namespaces, ns)
	l.mu.Unlock()

	ns.nl, err = netlink.NewHandleAt(handle)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", name, err)
	}
	lo, err := ns.nl.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("find lo in %s: %w", name, err)
	}
	if err := ns.nl.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("set lo up in %s: %w", name, err)
	}
	// Interfaces made later skip duplicate address detection, so link-local
	// addresses (used by neighbour discovery) are usable at once too.
	if err := ns.Sysctl("net.ipv6.conf.default.accept_dad", "0"); err != nil {
		return nil, err
	}
	return ns, nil
}

// createNamed makes a named namespace from a throwaway thread: unshare moves
// the calling thread, and that thread is then discarded (it exits locked)
// rather than returned to the Go scheduler in the wrong namespace.
func createNamed(name string) (netns.NsHandle, error) {
	type result struct {
		h   netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread dies with this goroutine.
		h, err := netns.NewNamed(name)
		done <- result{h, err}
	}()
	r := <-done
	return r.h, r.err
}

// OnClose registers fn to run when the Lab closes, before the namespaces are
// deleted (servers and monitors use it to stop).
func (l *Lab) OnClose(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closers = append(l.closers, fn)
}

// Close stops everything registered with OnClose and deletes every namespace
// the Lab created. Deleting a namespace also removes its veth ends, so the
// peers in other namespaces disappear with it.
func (l *Lab) Close() error {
	l.mu.Lock()
	closers, namespaces := l.closers, l.namespaces
	l.closers, l.namespaces = nil, nil
	l.mu.Unlock()

	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	var errs []error
	for _, ns := range namespaces {
		if ns.nl != nil {
			ns.nl.Close()
		}
		if err := ns.handle.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close handle of %s: %w", ns.Name, err))
		}
		if err := netns.DeleteNamed(ns.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete netns %s: %w", ns.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Do runs fn on an OS thread that has entered ns, and waits for it. Anything
// fn starts on that thread — child processes (nft, ip), sockets — lives in
// ns. Goroutines fn spawns do not; they run on other threads.
//
// The thread is never handed back to the scheduler: it exits with its
// goroutine, so no other goroutine can ever run in the wrong namespace.
func (ns *NS) Do(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns.handle); err != nil {
			done <- fmt.Errorf("enter netns %s: %w", ns.Name, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// Path is the namespace's bind-mount path, usable with nsenter --net=.
func (ns *NS) Path() string { return "/var/run/netns/" + ns.Name }
