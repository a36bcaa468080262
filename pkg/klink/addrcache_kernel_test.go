package klink

import (
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestAddrCacheListsAgainOnlyAfterAChange: in a test namespace, repeated
// calls list the addresses once; an address added afterwards is seen
// (after the kernel's notification), and after Close every call lists.
func TestAddrCacheListsAgainOnlyAfterAChange(t *testing.T) {
	netnstest.RequireKernel(t)
	ns, err := netnstest.New(t).NewNS("addrcache")
	if err != nil {
		t.Fatal(err)
	}
	client, err := New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var listings atomic.Int32
	list := func() []netip.Addr {
		listings.Add(1)
		addrs, err := client.HostAddrs("")
		if err != nil {
			t.Error(err)
		}
		return addrs
	}
	var cache *AddrCache
	if err := ns.Do(func() error { cache = NewAddrCache(list); return nil }); err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	if cache.broken.Load() {
		t.Fatal("the subscription failed")
	}
	first := slices.Clone(cache.Addrs())
	for range 5 {
		if got := cache.Addrs(); !slices.Equal(got, first) {
			t.Fatalf("addresses changed without a change: %v, then %v", first, got)
		}
	}
	if n := listings.Load(); n != 1 {
		t.Fatalf("listed %d times for 6 calls without a change, want 1", n)
	}

	added := netip.MustParseAddr("192.0.2.77")
	if err := client.AddAddr("lo", added); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(cache.Addrs(), added) {
		if time.Now().After(deadline) {
			t.Fatalf("%s not seen after the kernel's notification (listed %d times)", added, listings.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}

	cache.Close()
	for !cache.broken.Load() {
		if time.Now().After(deadline) {
			t.Fatal("Close did not end the subscription")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := listings.Load()
	cache.Addrs()
	cache.Addrs()
	if n := listings.Load() - before; n != 2 {
		t.Fatalf("after Close: %d listings for 2 calls, want 2", n)
	}
}
