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

// MaxElements is the capacity of every hash set this package creates. The
// kernel's default (and upstream kube-proxy's) is 65536, which
// KUBE-LOOP-BACK (one member per endpoint) outgrows at about 6,500
// services × 10 endpoints: further adds fail with "hash is full". A hash
// set's memory follows its members, not this bound. Sets adopted from an
// earlier run keep the capacity they were created with.
const MaxElements = 1 << 20

// Family is the address family of a hash set; bitmap:port sets have none.
type Family string

// Address families.
const (
	Inet  Family = "inet"
	Inet6 Family = "inet6"
)

// Set describes a set to create.
type Set struct {
	Name   string
	Type   Type
	Family Family
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
	// ListSets returns the names of every set.
	ListSets() ([]string, error)
	// ListEntries returns the members of a set.
	ListEntries(name string) ([]Entry, error)
	// AddEntry and DelEntry change one member; adding a present member
	// and deleting an absent one succeed.
	AddEntry(name string, e Entry) error
	DelEntry(name string, e Entry) error
}

// Errors callers can test with errors.Is.
var (
	ErrNotFound = errors.New("no such ipset or entry")
	ErrExists   = errors.New("ipset or entry exists")
	ErrInUse    = errors.New("ipset in use")
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
