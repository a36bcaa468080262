package klink

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
)

// AddrCache answers "what are the host's addresses" from the last listing
// until the kernel announces an address change (RTNLGRP_IPV4_IFADDR and
// RTNLGRP_IPV6_IFADDR), instead of listing them again on every sync: under
// endpoint churn they never change, and each listing allocates.
//
// When the subscription cannot be made, or breaks (a notification lost to
// a full socket buffer ends it), every call lists again, as without a
// cache: a missed change must not leave the addresses stale.
type AddrCache struct {
	list   func() []netip.Addr
	dirty  atomic.Bool // a change was announced since the last listing
	broken atomic.Bool // no subscription: list on every call
	done   chan struct{}

	mu    sync.Mutex
	addrs []netip.Addr
}

// NewAddrCache subscribes to address changes in the network namespace of
// the calling thread and returns a cache over list, which must list that
// same namespace's addresses. Close ends the subscription.
func NewAddrCache(list func() []netip.Addr) *AddrCache {
	c := &AddrCache{list: list, done: make(chan struct{})}
	c.dirty.Store(true)
	updates := make(chan netlink.AddrUpdate, 64)
	err := netlink.AddrSubscribeWithOptions(updates, c.done, netlink.AddrSubscribeOptions{
		ErrorCallback: func(error) { c.broken.Store(true) },
	})
	if err != nil {
		c.broken.Store(true)
		return c
	}
	go func() {
		for range updates {
			c.dirty.Store(true)
		}
		c.broken.Store(true) // the subscription ended
	}()
	return c
}

// Addrs returns the host's addresses. The slice is shared between calls:
// callers must not modify it.
func (c *AddrCache) Addrs() []netip.Addr {
	if c.broken.Load() {
		return c.list()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Cleared before listing: a change announced during the listing
	// makes the next call list again.
	if c.dirty.Swap(false) {
		c.addrs = c.list()
	}
	return c.addrs
}

// Close ends the subscription; Addrs then lists on every call.
func (c *AddrCache) Close() {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
}
