package klink

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestFake(t *testing.T) {
	node := netip.MustParseAddr("192.168.0.2")
	vip := netip.MustParseAddr("172.30.0.1")
	f := NewFake(map[string][]netip.Addr{"eth0": {node}})
	if err := f.AddAddr("kube-ipvs0", vip); !errors.Is(err, ErrNotFound) {
		t.Fatalf("add to missing link: %v", err)
	}
	for range 2 {
		if err := f.EnsureDummy("kube-ipvs0"); err != nil {
			t.Fatal(err)
		}
		if err := f.AddAddr("kube-ipvs0", vip); err != nil {
			t.Fatal(err)
		}
	}
	if f.Writes() != 2 {
		t.Errorf("writes = %d, want 2 (idempotent repeats)", f.Writes())
	}
	host, _ := f.HostAddrs("kube-ipvs0")
	if !slices.Equal(host, []netip.Addr{node}) {
		t.Errorf("HostAddrs excluding the dummy = %v", host)
	}
	if err := f.DeleteLink("kube-ipvs0"); err != nil || f.HasLink("kube-ipvs0") {
		t.Errorf("delete: %v", err)
	}
}
