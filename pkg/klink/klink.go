// Package klink manages the dummy interface IPVS mode parks its virtual IPs
// on (kube-ipvs0) and lists the host's addresses, through netlink; AddrCache
// lists them again only after the kernel announces a change. It knows
// nothing about Kubernetes. Fake is an in-memory stand-in for tests.
package klink

import (
	"errors"
	"net/netip"
)

// Interface is the links and addresses of one network namespace.
type Interface interface {
	// EnsureDummy creates the dummy link name if it does not exist. Like
	// upstream it leaves the link down: nothing is ever sent through it, it
	// only makes its addresses local to the host.
	EnsureDummy(name string) error
	// DeleteLink removes link name; a missing link is not an error.
	DeleteLink(name string) error
	// ListAddrs returns the addresses on link name (ErrNotFound if absent).
	ListAddrs(name string) ([]netip.Addr, error)
	// AddAddr and DelAddr add or remove one host address (/32 or /128) on
	// link name. Adding a present or deleting an absent address succeeds.
	AddAddr(name string, addr netip.Addr) error
	DelAddr(name string, addr netip.Addr) error
	// HostAddrs returns the addresses on every link except exclude,
	// loopback and IPv6 link-local ones included, so that callers decide.
	HostAddrs(exclude string) ([]netip.Addr, error)
}

// ErrNotFound reports a missing link.
var ErrNotFound = errors.New("no such link")
