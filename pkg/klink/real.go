package klink

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Client is the real Interface over rtnetlink.
type Client struct {
	h *netlink.Handle
}

var _ Interface = (*Client)(nil)

// New returns a client for the network namespace at nsPath ("" for the
// caller's own). Close releases its sockets.
func New(nsPath string) (*Client, error) {
	var (
		h   *netlink.Handle
		err error
	)
	if nsPath == "" {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		var ns netns.NsHandle
		if ns, err = netns.GetFromPath(nsPath); err == nil {
			defer ns.Close()
			h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	return &Client{h: h}, nil
}

// Close releases the netlink sockets.
func (c *Client) Close() { c.h.Close() }

// EnsureDummy is part of Interface.
func (c *Client) EnsureDummy(name string) error {
	if _, err := c.h.LinkByName(name); err == nil {
		return nil
	}
	err := c.h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}})
	if err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("creating dummy link %s: %w", name, err)
	}
	return nil
}

// DeleteLink is part of Interface.
func (c *Client) DeleteLink(name string) error {
	link, err := c.link(name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.h.LinkDel(link); err != nil {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	return nil
}

// ListAddrs is part of Interface.
func (c *Client) ListAddrs(name string) ([]netip.Addr, error) {
	link, err := c.link(name)
	if err != nil {
		return nil, err
	}
	addrs, err := c.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", name, err)
	}
	return toAddrs(addrs), nil
}

// AddAddr is part of Interface.
func (c *Client) AddAddr(name string, addr netip.Addr) error {
	link, err := c.link(name)
	if err != nil {
		return err
	}
	err = c.h.AddrAdd(link, hostAddr(addr))
	if err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("adding %s to %s: %w", addr, name, err)
	}
	return nil
}

// DelAddr is part of Interface.
func (c *Client) DelAddr(name string, addr netip.Addr) error {
	link, err := c.link(name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	err = c.h.AddrDel(link, hostAddr(addr))
	if err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("deleting %s from %s: %w", addr, name, err)
	}
	return nil
}

// HostAddrs is part of Interface. A dump interrupted by a concurrent
// change is retried once, then reported.
func (c *Client) HostAddrs(exclude string) ([]netip.Addr, error) {
	var skip int = -1
	if exclude != "" {
		if link, err := c.link(exclude); err == nil {
			skip = link.Attrs().Index
		}
	}
	var (
		addrs []netlink.Addr
		err   error
	)
	for range 2 {
		if addrs, err = c.h.AddrList(nil, netlink.FAMILY_ALL); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing host addresses: %w", err)
	}
	kept := addrs[:0]
	for _, a := range addrs {
		if a.LinkIndex != skip {
			kept = append(kept, a)
		}
	}
	return toAddrs(kept), nil
}

func (c *Client) link(name string) (netlink.Link, error) {
	link, err := c.h.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil, fmt.Errorf("link %s: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("looking up link %s: %w", name, err)
	}
	return link, nil
}

func hostAddr(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: netlink.NewIPNet(a.AsSlice())}
}

func toAddrs(in []netlink.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(in))
	for _, a := range in {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out
}
