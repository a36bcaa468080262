//go:build ipvsvm

// Tests in *_vm_test.go files need a kernel with IPVS. They are built only with
// -tags ipvsvm, into the static test binary that hack/ipvs-vm.sh boots inside a
// throwaway qemu VM; a plain `go test ./...` on the host never compiles them.
// Inside the VM nothing is ever skipped: a missing prerequisite is a failure.

package ipvs_test

import (
	"net/netip"
	"syscall"
	"testing"

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestVMSmoke checks the VM itself, without the backend: moby/ipvs programs a
// virtual server in a node namespace and real TCP connections from a client
// namespace reach both pods.
func TestVMSmoke(t *testing.T) {
	lab := netnstest.New(t)
	cluster, err := netnstest.NewCluster(lab, 1)
	if err != nil {
		t.Fatal(err)
	}
	node := cluster.Nodes[0]
	var pods []*netnstest.Pod
	for _, name := range []string{"pod-a", "pod-b"} {
		p, err := node.AddPod(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.NS.Serve(name, proxy.TCP, 8080); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	client, _, err := cluster.AddClient("client", node, 1)
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("172.30.0.10")
	if err := node.NS.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "smoke0"}}); err != nil {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("dummy link: %v", err)
	}
	if err := node.NS.AddAddr("smoke0", netip.PrefixFrom(vip, 32)); err != nil {
		t.Fatal(err)
	}
	if err := node.NS.LinkUp("smoke0"); err != nil {
		t.Fatal(err)
	}

	h, err := mobyipvs.New(node.NS.Path())
	if err != nil {
		t.Fatalf("ipvs handle in node: %v", err)
	}
	defer h.Close()
	svc := &mobyipvs.Service{
		Address: vip.AsSlice(), Protocol: syscall.IPPROTO_TCP, Port: 80,
		SchedName: mobyipvs.RoundRobin, AddressFamily: syscall.AF_INET, Netmask: 0xffffffff,
	}
	if err := h.NewService(svc); err != nil {
		t.Fatalf("NewService: %v", err)
	}
	for _, p := range pods {
		d := &mobyipvs.Destination{
			Address: p.IPv4.AsSlice(), Port: 8080, Weight: 1,
			ConnectionFlags: mobyipvs.ConnectionFlagMasq, AddressFamily: syscall.AF_INET,
		}
		if err := h.NewDestination(svc, d); err != nil {
			t.Fatalf("NewDestination %s: %v", p.IPv4, err)
		}
	}
	ds, err := h.GetDestinations(svc)
	if err != nil || len(ds) != 2 {
		t.Fatalf("GetDestinations = %v, %v; want 2", ds, err)
	}

	c := netnstest.Client{NS: client}
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		ans, err := c.Ask(proxy.TCP, netip.AddrPortFrom(vip, 80))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		seen[ans.Server]++
	}
	t.Logf("answers: %v", seen)
	if seen["pod-a"] != 3 || seen["pod-b"] != 3 {
		t.Errorf("rr over two pods answered %v, want 3 each", seen)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	svcs, _ := h.GetServices()
	if len(svcs) != 0 {
		t.Errorf("services left after Flush: %d", len(svcs))
	}
}
