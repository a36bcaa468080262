package netnstest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AllowedPrefixes are the only ranges this package puts on interfaces or in
// routes: benchmarking space (nodes, pods, clients, external IPs), a private
// service CIDR, and unique-local IPv6. None of them is routed on the
// machine's real network, and every route we add stays between test
// namespaces.
var AllowedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("172.30.0.0/16"),
	netip.MustParsePrefix("fd00::/8"),
}

func allowed(p netip.Prefix) error {
	for _, a := range AllowedPrefixes {
		if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return nil
		}
	}
	return fmt.Errorf("%s is outside the test ranges %v", p, AllowedPrefixes)
}

// Veth creates a veth pair with end aName in a and end bName in b, both up.
// Interface names must be at most 15 characters.
func Veth(a *NS, aName string, b *NS, bName string) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: aName},
		PeerName:      bName,
		PeerNamespace: netlink.NsFd(int(b.handle)),
	}
	if err := a.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s/%s - %s/%s: %w", a.Role, aName, b.Role, bName, err)
	}
	if err := a.LinkUp(aName); err != nil {
		return err
	}
	return b.LinkUp(bName)
}

// LinkUp sets interface name up.
func (ns *NS) LinkUp(name string) error {
	link, err := ns.nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", name, ns.Role, err)
	}
	if err := ns.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up in %s: %w", name, ns.Role, err)
	}
	return nil
}

// AddAddr puts addr (with its prefix length) on interface dev. IPv6
// addresses get nodad so they are usable at once instead of after duplicate
// address detection.
func (ns *NS) AddAddr(dev string, addr netip.Prefix) error {
	if err := allowed(addr.Masked()); err != nil {
		return err
	}
	link, err := ns.nl.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", dev, ns.Role, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   addr.Addr().AsSlice(),
		Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen()),
	}}
	if addr.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := ns.nl.AddrAdd(link, a); err != nil {
		return fmt.Errorf("add %s to %s in %s: %w", addr, dev, ns.Role, err)
	}
	if addr.Addr().Is6() && link.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 {
		return ns.waitLocalRoute(addr.Addr(), dev)
	}
	return nil
}

// localRouteWait bounds waitLocalRoute: the kernel's work queue runs
// within milliseconds even on a loaded machine.
const localRouteWait = 5 * time.Second

// waitLocalRoute waits until packets to addr, an IPv6 address just put on
// dev, are delivered here. The kernel lists the address at once but adds
// its local route from a work queue; a connection made before that leaves
// through dev towards a neighbour that never answers, and its SYN waits
// in the neighbour's queue, where no retransmission replaces it, for
// longer than a test's dial allows. Only a link with carrier gets the
// route (at once); one without gets it when the carrier comes.
func (ns *NS) waitLocalRoute(addr netip.Addr, dev string) error {
	deadline := time.Now().Add(localRouteWait)
	for {
		routes, err := ns.nl.RouteGet(addr.AsSlice())
		if err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on %s in %s: no local route after %s (last lookup: %v, %v)", addr, dev, ns.Role, localRouteWait, routes, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// AddRoute routes dst via gw (a neighbour on a directly connected test
// link). Both must be inside the test ranges; default routes are refused.
func (ns *NS) AddRoute(dst netip.Prefix, gw netip.Addr) error {
	if err := allowed(dst); err != nil {
		return fmt.Errorf("route in %s: %w", ns.Role, err)
	}
	if err := allowed(netip.PrefixFrom(gw, gw.BitLen())); err != nil {
		return fmt.Errorf("gateway in %s: %w", ns.Role, err)
	}
	route := &netlink.Route{
		Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Gw:  gw.AsSlice(),
	}
	if err := ns.nl.RouteAdd(route); err != nil {
		return fmt.Errorf("route %s via %s in %s: %w", dst, gw, ns.Role, err)
	}
	return nil
}

// AddDeviceRoute routes dst out of interface dev (no gateway), e.g. into a
// dummy device that swallows whatever is not DNATed.
func (ns *NS) AddDeviceRoute(dst netip.Prefix, dev string) error {
	if err := allowed(dst); err != nil {
		return fmt.Errorf("route in %s: %w", ns.Role, err)
	}
	link, err := ns.nl.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", dev, ns.Role, err)
	}
	route := &netlink.Route{
		Dst:       &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		LinkIndex: link.Attrs().Index,
	}
	if err := ns.nl.RouteAdd(route); err != nil {
		return fmt.Errorf("route %s dev %s in %s: %w", dst, dev, ns.Role, err)
	}
	return nil
}

// Sysctl writes a sysctl inside the namespace; key uses dots
// ("net.ipv4.ip_forward"). Only net.* keys are namespaced, so others are
// refused: writing them would change the machine.
func (ns *NS) Sysctl(key, value string) error {
	if !strings.HasPrefix(key, "net.") {
		return fmt.Errorf("sysctl %s is not per network namespace", key)
	}
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	return ns.Do(func() error {
		// /proc/sys/net resolves against the namespace of the opening thread.
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, ns.Role, err)
		}
		return nil
	})
}

// EnableForwarding turns on IPv4 and IPv6 forwarding in the namespace.
func (ns *NS) EnableForwarding() error {
	if err := ns.Sysctl("net.ipv4.ip_forward", "1"); err != nil {
		return err
	}
	return ns.Sysctl("net.ipv6.conf.all.forwarding", "1")
}

// Run runs a command inside the namespace and returns its stdout; a failure
// carries stderr.
func (ns *NS) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return ns.RunInput(ctx, "", name, args...)
}

// RunInput is Run with stdin (e.g. an nft ruleset for "nft -f -").
func (ns *NS) RunInput(ctx context.Context, stdin, name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	err := ns.Do(func() error {
		// The fork happens on this thread, so the child starts in ns.
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		return cmd.Run()
	})
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns.Role, err, stderr.String())
	}
	return stdout.Bytes(), nil
}
