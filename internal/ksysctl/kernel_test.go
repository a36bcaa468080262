package ksysctl_test

import (
	"errors"
	"testing"

	"github.com/svcproxy/svcproxy/internal/ksysctl"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// In a test namespace: a per-namespace sysctl is written and read back; a
// knob only the initial namespace may change reports ErrNotWritable (or,
// on kernels that allow it per namespace, is written) — never a plain
// failure. Nothing here touches the root namespace.
func TestProcInNamespace(t *testing.T) {
	netnstest.RequireKernel(t)
	ns, err := netnstest.New(t).NewNS("sysctl")
	if err != nil {
		t.Fatal(err)
	}
	p := ksysctl.Proc{}
	err = ns.Do(func() error {
		if err := p.WriteInt("net.ipv4.conf.all.route_localnet", 1); err != nil {
			return err
		}
		if v, err := p.ReadInt("net.ipv4.conf.all.route_localnet"); err != nil || v != 1 {
			t.Errorf("route_localnet read back %d, %v", v, err)
		}
		max, err := p.ReadInt("net.netfilter.nf_conntrack_max")
		if err != nil {
			return err
		}
		err = p.WriteInt("net.netfilter.nf_conntrack_max", max)
		if err != nil && !errors.Is(err, ksysctl.ErrNotWritable) {
			t.Errorf("nf_conntrack_max in a child namespace: %v; want success or ErrNotWritable", err)
		}
		t.Logf("nf_conntrack_max=%d in a child namespace, rewrite: %v", max, err)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
