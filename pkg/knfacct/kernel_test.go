package knfacct_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/knfacct"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// newClient returns a client whose socket lives in a fresh test namespace,
// and that namespace. It fails (never skips) without root: this test is
// the only proof the wire format is right.
func newClient(t *testing.T, lab *netnstest.Lab, role string) (*knfacct.Client, *netnstest.NS) {
	t.Helper()
	netnstest.RequireKernel(t)
	ns, err := lab.NewNS(role)
	if err != nil {
		t.Fatal(err)
	}
	var c *knfacct.Client
	if err := ns.Do(func() (err error) { c, err = knfacct.New(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, ns
}

// TestKernel creates an object, counts packets into it with an iptables
// rule and reads them back, in a namespace of its own; a second namespace
// must not see the object (objects are per namespace, so the test never
// touches the host's).
func TestKernel(t *testing.T) {
	lab := netnstest.New(t)
	c, ns := newClient(t, lab, "acct")
	const name = "svcproxy_test_pkts"
	if _, err := c.Get(name); !errors.Is(err, knfacct.ErrNotFound) {
		t.Fatalf("Get before Ensure: %v, want ErrNotFound", err)
	}
	if err := c.Ensure(name); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Get(name); n != 0 || err != nil {
		t.Fatalf("Get after Ensure = %d, %v; want 0", n, err)
	}
	if _, err := ns.Run(context.Background(), "iptables-nft", "-A", "OUTPUT", "-o", "lo", "-p", "udp",
		"--dport", "9", "-m", "nfacct", "--nfacct-name", name); err != nil {
		t.Fatal(err)
	}
	send(t, ns, 3)
	if n, err := c.Get(name); n != 3 || err != nil {
		t.Fatalf("Get after 3 datagrams = %d, %v; want 3", n, err)
	}
	if err := c.Ensure(name); err != nil {
		t.Fatalf("Ensure of an existing object: %v", err)
	}
	if n, err := c.Get(name); n != 3 || err != nil {
		t.Errorf("Get after a second Ensure = %d, %v; want 3 (counts kept)", n, err)
	}
	other, _ := newClient(t, lab, "other")
	if _, err := other.Get(name); !errors.Is(err, knfacct.ErrNotFound) {
		t.Errorf("another namespace sees the object: %v", err)
	}
}

// send writes n UDP datagrams to 127.0.0.1:9 from inside ns; a listener
// takes them, so no ICMP error fails the next write.
func send(t *testing.T, ns *netnstest.NS, n int) {
	t.Helper()
	err := ns.Do(func() error {
		l, err := net.ListenPacket("udp", "127.0.0.1:9")
		if err != nil {
			return err
		}
		defer l.Close()
		conn, err := net.Dial("udp", "127.0.0.1:9")
		if err != nil {
			return err
		}
		defer conn.Close()
		for range n {
			if _, err := conn.Write([]byte("x")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
