// Package kipvs is a thin client for the kernel's IPVS table: virtual
// services and their destinations (real servers), and the connection
// timeouts. It knows nothing about Kubernetes. The real client talks generic
// netlink through github.com/moby/ipvs; Fake is an in-memory stand-in for
// tests of the code that uses it.
package kipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Protocol is an IP protocol number, as IPVS keys services by it.
type Protocol uint16

// The protocols a virtual service may balance.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

// String returns the protocol's lower-case name, as ipvsadm prints it.
func (p Protocol) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", uint16(p))
}

// Service flags (IP_VS_SVC_F_*). The kernel also reports flagHashed on
// every service it lists; the real client strips it so that listed and
// desired services compare equal.
const (
	// FlagPersistent makes a client stick to its destination for Timeout
	// seconds (ClientIP session affinity).
	FlagPersistent uint32 = 0x1
	flagHashed     uint32 = 0x2
)

// The schedulers the kernel ships (ip_vs_<name> modules).
const (
	RoundRobin              = "rr"
	WeightedRoundRobin      = "wrr"
	LeastConnection         = "lc"
	WeightedLeastConnection = "wlc"
	LocalityLeastConnection = "lblc"
	LocalityLeastConnRepl   = "lblcr"
	SourceHashing           = "sh"
	DestinationHashing      = "dh"
	ShortestExpectedDelay   = "sed"
	NeverQueue              = "nq"
	MaglevHashing           = "mh"
)

// Schedulers lists every scheduler name the kernel knows.
var Schedulers = []string{RoundRobin, WeightedRoundRobin, LeastConnection, WeightedLeastConnection,
	LocalityLeastConnection, LocalityLeastConnRepl, SourceHashing, DestinationHashing,
	ShortestExpectedDelay, NeverQueue, MaglevHashing}

// ServiceKey identifies a virtual service: address, protocol and port.
type ServiceKey struct {
	Addr     netip.Addr
	Protocol Protocol
	Port     uint16
}

// String formats the key as ipvsadm does: "TCP 10.0.0.1:80".
func (k ServiceKey) String() string {
	return k.Protocol.String() + " " + netip.AddrPortFrom(k.Addr, k.Port).String()
}

// Service is a virtual service. It is a comparable value: two services
// with equal fields need no update.
type Service struct {
	ServiceKey
	Scheduler string
	// Flags holds FlagPersistent and any scheduler flags.
	Flags uint32
	// Timeout is the persistence timeout in seconds (with FlagPersistent).
	Timeout uint32
}

// Destination is a real server of a virtual service, forwarded to by
// masquerading (NAT), the only method kube-proxy uses.
type Destination struct {
	Addr   netip.AddrPort
	Weight int
}

// DestinationStatus is a destination as listed, with its connection counts.
type DestinationStatus struct {
	Destination
	// ActiveConns counts established connections, InactiveConns all others
	// (for UDP: every flow still in the connection table).
	ActiveConns   int
	InactiveConns int
}

// Timeouts are the IPVS connection timeouts; a zero field is left as it is.
type Timeouts struct {
	TCP, TCPFin, UDP time.Duration
}

// Interface is the IPVS table of one network namespace.
type Interface interface {
	// ListServices returns every virtual service (of both families).
	ListServices() ([]Service, error)
	// AddService creates svc; it fails with ErrExists if the key exists.
	AddService(svc Service) error
	// UpdateService changes the scheduler, flags and timeout of svc.
	UpdateService(svc Service) error
	// DeleteService removes the service and its destinations.
	DeleteService(key ServiceKey) error
	// ListDestinations returns the destinations of the service key.
	ListDestinations(key ServiceKey) ([]DestinationStatus, error)
	// AddDestination, UpdateDestination and DeleteDestination change one
	// destination of the service key.
	AddDestination(key ServiceKey, dst Destination) error
	UpdateDestination(key ServiceKey, dst Destination) error
	DeleteDestination(key ServiceKey, addr netip.AddrPort) error
	// SetTimeouts sets the global connection timeouts.
	SetTimeouts(t Timeouts) error
}

// Errors the real client and the Fake report in the same way, so callers
// can test with errors.Is.
var (
	ErrNotFound = errors.New("no such IPVS object")
	ErrExists   = errors.New("IPVS object exists")
)
