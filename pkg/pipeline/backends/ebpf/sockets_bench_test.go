package ebpf

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// BenchmarkSocketsList is one conntrack cleanup round's listing of the
// translated sockets (Sockets.List) with processes spread over network
// namespaces in the cgroup, one per namespace holding a connected UDP
// socket the hooks translated; walk is its first step alone: finding the
// namespaces of the cgroup's processes.
func BenchmarkSocketsList(b *testing.B) {
	for _, c := range []struct{ procs, spaces int }{{20, 5}, {200, 50}} {
		s := socketsBench(b, c.procs, c.spaces)
		b.Run(fmt.Sprintf("procs=%d/netns=%d/List", c.procs, c.spaces), func(b *testing.B) {
			flows := 0
			for b.Loop() {
				flows = 0
				if err := s.List(context.Background(), s.family, func(kconntrack.Flow) { flows++ }); err != nil {
					b.Fatal(err)
				}
			}
			if flows != c.spaces {
				b.Errorf("List found %d sockets, want %d", flows, c.spaces)
			}
		})
		b.Run(fmt.Sprintf("procs=%d/netns=%d/walk", c.procs, c.spaces), func(b *testing.B) {
			for b.Loop() {
				spaces, err := netnsOf(s.cgroup)
				if err != nil {
					b.Fatal(err)
				}
				if len(spaces) != c.spaces {
					b.Fatalf("found %d network namespaces, want %d", len(spaces), c.spaces)
				}
				spaces.close()
			}
		})
	}
}

// socketsBench is a throwaway cgroup with the IPv4 hooks and procs
// processes in it, spread over spaces network namespaces; in each, one
// holds a connected UDP socket to a Service (translated, so listed).
func socketsBench(b *testing.B, procs, spaces int) *Sockets {
	netnstest.RequireKernel(b, "nsenter")
	pins, cgroup := netnstest.MountThrowaway(b, "bpf"), netnstest.ThrowawayCgroup(b, "svcproxy-ebpf-bench")
	lab := netnstest.New(b)
	p, err := New(proxy.IPv4, Options{PinDir: pins, Cgroup: cgroup})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Cleanup(context.Background()) })
	if err := p.Sync(context.Background(), stateOf(proxy.IPv4, svc("dns", proxy.UDP, vip4, 53, eps(srvIP4, 5301)...)), proxy.RecoverySync); err != nil {
		b.Fatal(err)
	}
	for i := range spaces {
		ns, err := lab.NewNS(fmt.Sprintf("b%d", i))
		if err != nil {
			b.Fatal(err)
		}
		// A route to the endpoint, for connect.
		if err := ns.AddAddr("lo", netip.MustParsePrefix("198.18.0.1/24")); err != nil {
			b.Fatal(err)
		}
		holdUDP(b, ns, cgroup)
		for j := i + spaces; j < procs; j += spaces {
			hold(b, ns, cgroup, "true")
		}
	}
	return p.Sockets()
}

// holdUDP starts a shell in ns and the cgroup that connects a UDP socket
// to the Service (bash's /dev/udp) and holds it until the benchmark ends.
func holdUDP(b *testing.B, ns *netnstest.NS, cgroup string) {
	hold(b, ns, cgroup, "exec 3<>/dev/udp/172.30.0.10/53")
}

// hold runs script in bash in ns and the cgroup, then sleeps there until
// the benchmark ends; it returns once the script ran.
func hold(b *testing.B, ns *netnstest.NS, cgroup, script string) {
	cmd := exec.Command("nsenter", "--net="+ns.Path(), "bash", "-c", script+" && echo ok && exec sleep 1d")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := netnstest.StartInCgroup(cmd, cgroup); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 3)
	if n, err := io.ReadFull(out, buf); err != nil || string(buf[:n]) != "ok\n" {
		b.Fatalf("%s: printed %q (%v)", script, buf[:n], err)
	}
}
