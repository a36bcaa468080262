package framework

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// cgroupHooks are the cgroup attach points of ebpf mode's socket hooks
// (both families; IPv4 also hooks the IPv6 points, for IPv4-mapped
// destinations).
var cgroupHooks = map[string]ebpf.AttachType{
	"connect4": ebpf.AttachCGroupInet4Connect, "sendmsg4": ebpf.AttachCGroupUDP4Sendmsg,
	"recvmsg4": ebpf.AttachCGroupUDP4Recvmsg, "getpeername4": ebpf.AttachCgroupInet4GetPeername,
	"connect6": ebpf.AttachCGroupInet6Connect, "sendmsg6": ebpf.AttachCGroupUDP6Sendmsg,
	"recvmsg6": ebpf.AttachCGroupUDP6Recvmsg, "getpeername6": ebpf.AttachCgroupInet6GetPeername,
}

// tcxHooks are the tc attach points of the tc programs.
var tcxHooks = map[string]ebpf.AttachType{"tcx ingress": ebpf.AttachTCXIngress, "tcx egress": ebpf.AttachTCXEgress}

// BPFAttached lists the BPF programs the kernel runs for node n, asked of
// the kernel rather than read from the pins: those at its cgroup's socket
// hooks (the cgroup its pods' clients run in) and at the TCX and XDP hooks
// of iface in its namespace. "" when none. A program left attached by a
// pin nobody maintains shows here whether or not its pin is still there.
func (c *Cluster) BPFAttached(n *Node, iface string) (string, error) {
	var found []string
	if n.ebpf != nil {
		f, err := os.Open(n.ebpf.cgroup)
		if err != nil {
			return "", err
		}
		defer f.Close()
		for name, at := range cgroupHooks {
			res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: at})
			if err != nil {
				return "", fmt.Errorf("querying %s of cgroup %s: %w", name, n.ebpf.cgroup, err)
			}
			if len(res.Programs) > 0 {
				found = append(found, fmt.Sprintf("%d at the cgroup's %s", len(res.Programs), name))
			}
		}
	}
	var queryErr error
	err := inNetns(n.NS, func() {
		dev, err := net.InterfaceByName(iface)
		if err != nil {
			queryErr = err
			return
		}
		for name, at := range tcxHooks {
			res, err := link.QueryPrograms(link.QueryOptions{Target: dev.Index, Attach: at})
			if err != nil {
				queryErr = fmt.Errorf("querying %s of %s: %w", name, iface, err)
				return
			}
			if len(res.Programs) > 0 {
				found = append(found, fmt.Sprintf("%d at %s's %s", len(res.Programs), iface, name))
			}
		}
	})
	if err == nil {
		err = queryErr
	}
	if err != nil {
		return "", err
	}
	out, err := c.Exec(n, "ip", "-d", "link", "show", "dev", iface)
	if err != nil {
		return "", err
	}
	if strings.Contains(out, " xdp") || strings.Contains(out, "prog/xdp") {
		found = append(found, "an XDP program on "+iface)
	}
	slices.Sort(found)
	return strings.Join(found, ", "), nil
}
