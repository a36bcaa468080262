// Package kipset is a thin client for the kernel's ipsets over netlink (no
// ipset binary). It knows nothing about Kubernetes. Fake is an in-memory
// stand-in for tests of the code that uses it.
package kipset

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// Type is an ipset type.
type Type string

// The set types kube-proxy's IPVS mode uses.
const (
	HashIP        Type = "hash:ip"
	HashIPPort    Type = "hash:ip,port"
	HashIPPortIP  Type = "hash:ip,port,ip"
	HashIPPortNet Type = "hash:ip,port,net"
	BitmapPort    Type = "bitmap:port"
)

// DefaultMaxElements is the capacity of a hash set created without one:
// the kernel's default, and what upstream kube-proxy creates its sets with
// (hashsize 1024, maxelem 65536). Upstream creates its sets with -exist,
// which the kernel grants only to a set created with the same parameters,
// so a set of another capacity stops upstream's every sync after a
// rollback. A hash set's memory follows its members, not this bound.
const DefaultMaxElements = 65536

// Family is the address family of a hash set; bitmap:port sets have none.
type Family string

// Address families.
const (
	Inet  Family = "inet"
	Inet6 Family = "inet6"
)

// Set describes a set: one to create, or one listed.
type Set struct {
	Name   string
	Type   Type
	Family Family
	// MaxElements is a hash set's capacity; 0 creates one with
	// DefaultMaxElements. bitmap:port sets have none (always 0).
	MaxElements uint32
	// Comment is kept by the caller for humans; ipset has no set comments.
	Comment string
}

// Protocol numbers an entry's port belongs to.
const (
	TCP  uint8 = 6
	UDP  uint8 = 17
	SCTP uint8 = 132
)

// Entry is one member. Which fields count depends on the set's type:
// hash:ip uses IP; hash:ip,port IP, Protocol, Port; hash:ip,port,ip adds
// IP2; hash:ip,port,net adds Net; bitmap:port uses Port only. Entries are
// comparable values.
type Entry struct {
	IP       netip.Addr
	Protocol uint8
	Port     uint16
	IP2      netip.Addr
	Net      netip.Prefix
}

// String formats the entry as the ipset tool does ("10.0.0.1,tcp:80,10.0.0.1").
func (e Entry) String() string {
	if !e.IP.IsValid() {
		return strconv.Itoa(int(e.Port)) // bitmap:port
	}
	s := e.IP.String()
	if e.Protocol != 0 {
		s += "," + protoName(e.Protocol) + ":" + strconv.Itoa(int(e.Port))
	}
	switch {
	case e.IP2.IsValid():
		s += "," + e.IP2.String()
	case e.Net.IsValid():
		s += "," + e.Net.String()
	}
	return s
}

func protoName(p uint8) string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// Interface is the ipsets of one network namespace.
type Interface interface {
	// CreateSet creates set; an existing set of the same name is an ErrExists.
	CreateSet(set Set) error
	// DestroySet removes a set (ErrNotFound if absent, which callers that
	// only want it gone ignore; ErrInUse if an iptables rule still
	// references it).
	DestroySet(name string) error
	// ListSets describes every set (name, type, family, capacity).
	ListSets() ([]Set, error)
	// ListEntries returns the members of a set.
	ListEntries(name string) ([]Entry, error)
	// AddEntry and DelEntry change one member; adding a present member
	// and deleting an absent one succeed.
	AddEntry(name string, e Entry) error
	DelEntry(name string, e Entry) error
	// SwapSets exchanges two sets of the same type and family in one
	// step, contents and capacity: each name then holds what the other
	// did, and iptables rules that match on a name see its new contents.
	SwapSets(a, b string) error
}

// Errors callers can test with errors.Is.
var (
	ErrNotFound = errors.New("no such ipset or entry")
	ErrExists   = errors.New("ipset or entry exists")
	ErrInUse    = errors.New("ipset in use")
	// ErrFull: a hash set holds MaxElements members and refuses another.
	ErrFull = errors.New("ipset is full")
)

// validate rejects entries the kernel would refuse or misread for a set of
// type t. bitmap:port takes a port and nothing else: its netlink policy has
// no protocol (the kernel refuses IPSET_ATTR_PROTO with "invalid
// protocol"), so a protocol here is a caller's mistake, not something to
// drop silently.
func validate(t Type, e Entry) error {
	needIP := t != BitmapPort
	needPort := t != HashIP
	switch {
	case t == BitmapPort && (e.IP.IsValid() || e.Protocol != 0 || e.IP2.IsValid() || e.Net.IsValid()):
		return fmt.Errorf("%s entry %v: a bitmap:port member is a port only", t, e)
	case needIP && !e.IP.IsValid():
		return fmt.Errorf("%s entry %v needs an address", t, e)
	case needPort && t != BitmapPort && e.Protocol == 0:
		return fmt.Errorf("%s entry %v needs a protocol", t, e)
	case t == HashIPPortIP && !e.IP2.IsValid():
		return fmt.Errorf("%s entry %v needs a second address", t, e)
	case t == HashIPPortNet && !e.Net.IsValid():
		return fmt.Errorf("%s entry %v needs a network", t, e)
	}
	return nil
}
