//go:build ipvsvm

package ipvs_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// Others' VIPs in these tests: keepalived's on this node (a dummy link of
// its own), and one held by a peer node (not local here).
var (
	keepalivedVIPs = [2]netip.Addr{netip.MustParseAddr("198.18.250.10"), netip.MustParseAddr("fd00:250::10")}
	peerVIP        = netip.MustParseAddr("198.18.251.7")
)

// TestVMCleanupLeavesForeign: the cleanup of IPVS mode's leftovers (what
// --cleanup and nftables mode's start-up run) deletes the virtual servers
// IPVS mode made, on the real kernel, and no other: keepalived's VIPs on
// the node, its own address and a peer's VIP on one of our node port
// numbers stay. A namespace whose only IPVS state is keepalived's has no
// leftovers at all.
func TestVMCleanupLeavesForeign(t *testing.T) {
	t.Run("ForeignOnlyIsNoLeftover", func(t *testing.T) {
		ns := freshNS(t, "keepalived")
		addVS(t, ns, kipvs.ServiceKey{Addr: keepalivedVIPs[0], Protocol: kipvs.TCP, Port: 6443})
		checkVMLeftovers(t, ns, false)
	})
	e := newVMEnv(t)
	for _, f := range scenario.Families {
		w := &world{e: e, f: f, tracker: model.NewTracker(f.Family)}
		p, _ := e.newProxier(t, f, ipvs.Options{})
		e.sync(t, p, w.apply(vmServices()...))
	}
	ours := e.virtualServers(t)
	if len(ours) == 0 {
		t.Fatal("the syncs made no virtual server in node1")
	}
	foreign := e.addForeign(t)
	checkVMLeftovers(t, e.node1.NS, true)
	if err := e.node1.NS.Do(cleanupLeftovers); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	left := e.virtualServers(t)
	for _, k := range ours {
		if slices.Contains(left, k) {
			t.Errorf("IPVS mode's virtual server %s left after cleanup", k)
		}
	}
	for _, k := range foreign {
		if !slices.Contains(left, k) {
			t.Errorf("cleanup deleted %s, which IPVS mode never made", k)
		}
	}
	checkVMLeftovers(t, e.node1.NS, false)
}

// cleanupLeftovers does what internal/leftovers does for IPVS mode (which
// this package may not import): a fresh Proxier per family, Cleanup.
func cleanupLeftovers() error {
	var errs []error
	for _, family := range proxy.Families {
		p, err := ipvs.New(family, ipvs.Options{ReapInterval: -1})
		if err != nil {
			return err
		}
		errs = append(errs, p.Cleanup(context.Background()))
		p.Close()
	}
	return errors.Join(errs...)
}

func checkVMLeftovers(t *testing.T, ns *netnstest.NS, want bool) {
	t.Helper()
	var (
		present bool
		what    string
	)
	err := ns.Do(func() (err error) {
		present, what, err = ipvs.LeftoversPresent()
		return err
	})
	if err != nil || present != want {
		t.Errorf("LeftoversPresent in %s = %v (%q), %v; want %v", ns.Role, present, what, err, want)
	}
}

// addForeign programs, in node1, what keepalived would beside IPVS mode:
// its VIPs (local, on a link of its own) on the API server's port, the
// node's address on that port, the TCP node port's number over UDP on the
// node's address, and a peer's VIP on the TCP node port's number.
func (e *vmEnv) addForeign(t *testing.T) []kipvs.ServiceKey {
	t.Helper()
	if err := e.node1.NS.Do(func() error {
		return netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "keepalived0"}})
	}); err != nil {
		t.Fatal(err)
	}
	for _, vip := range keepalivedVIPs {
		if err := e.node1.NS.AddAddr("keepalived0", netip.PrefixFrom(vip, vip.BitLen())); err != nil {
			t.Fatal(err)
		}
	}
	nodePort := uint16(vmServices()[0].nodePort) // TCP; UDP is +1
	foreign := []kipvs.ServiceKey{
		{Addr: keepalivedVIPs[0], Protocol: kipvs.TCP, Port: 6443},
		{Addr: keepalivedVIPs[1], Protocol: kipvs.TCP, Port: 6443},
		{Addr: e.node1.IPv4, Protocol: kipvs.TCP, Port: 6443},
		{Addr: e.node1.IPv4, Protocol: kipvs.UDP, Port: nodePort},
		{Addr: peerVIP, Protocol: kipvs.TCP, Port: nodePort},
	}
	for _, k := range foreign {
		addVS(t, e.node1.NS, k)
	}
	return foreign
}

func addVS(t *testing.T, ns *netnstest.NS, k kipvs.ServiceKey) {
	t.Helper()
	c, err := kipvs.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AddService(kipvs.Service{ServiceKey: k, Scheduler: kipvs.WeightedRoundRobin}); err != nil {
		t.Fatalf("AddService %s: %v", k, err)
	}
}

// virtualServers lists node1's virtual servers.
func (e *vmEnv) virtualServers(t *testing.T) []kipvs.ServiceKey {
	t.Helper()
	svcs, err := e.ipvsClient(t).ListServices()
	if err != nil {
		t.Fatal(err)
	}
	var out []kipvs.ServiceKey
	for _, s := range svcs {
		out = append(out, s.ServiceKey)
	}
	return out
}
