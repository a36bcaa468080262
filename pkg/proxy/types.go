// Package proxy is the vocabulary shared by every part of svcproxy: names of
// services and service ports, protocols, IP families and endpoints. It is a leaf: it
// imports nothing of ours and nothing from Kubernetes, so backends can use it
// without pulling in the API machinery.
package proxy

import "net/netip"

// IPFamily is an IP family, spelled as Kubernetes spells it ("IPv4", "IPv6").
type IPFamily string

// The IP families.
const (
	IPv4 IPFamily = "IPv4"
	IPv6 IPFamily = "IPv6"
)

// Families lists both IP families in a stable order.
var Families = []IPFamily{IPv4, IPv6}

// FamilyOf returns the family of addr.
func FamilyOf(addr netip.Addr) IPFamily {
	if addr.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// Contains reports whether addr belongs to family f.
func (f IPFamily) Contains(addr netip.Addr) bool {
	return addr.IsValid() && FamilyOf(addr) == f
}

// Endpoint is one backend's address and port. The model's endpoint lists
// hold them in this form, so that a dispatch of the desired State that
// balances over all of a port's endpoints can share the model's list
// instead of copying it.
type Endpoint struct {
	IP   netip.Addr
	Port uint16
}

// AddrPort returns the endpoint as an address and port.
func (e Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.IP, e.Port) }

// Compare orders endpoints by address, then port.
func (e Endpoint) Compare(o Endpoint) int {
	if c := e.IP.Compare(o.IP); c != 0 {
		return c
	}
	return int(e.Port) - int(o.Port)
}

// Protocol is an L4 protocol as Kubernetes spells it.
type Protocol string

// The protocols a Service port may use.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// ServiceName names a Service.
type ServiceName struct {
	Namespace string
	Name      string
}

// String returns "namespace/name".
func (n ServiceName) String() string { return n.Namespace + "/" + n.Name }

// ServicePortName names one port of a Service. Port is the port's name, which
// may be empty for a Service with a single port.
type ServicePortName struct {
	ServiceName
	Port     string
	Protocol Protocol
}

// String returns "namespace/name:port" (":port" omitted when the port has no
// name), which is how kube-proxy names a service port in comments and logs.
func (n ServicePortName) String() string {
	if n.Port == "" {
		return n.ServiceName.String()
	}
	return n.ServiceName.String() + ":" + n.Port
}

// Compare orders service port names by namespace, name, port name, protocol.
func (n ServicePortName) Compare(o ServicePortName) int {
	switch {
	case n.Namespace != o.Namespace:
		return cmpString(n.Namespace, o.Namespace)
	case n.Name != o.Name:
		return cmpString(n.Name, o.Name)
	case n.Port != o.Port:
		return cmpString(n.Port, o.Port)
	default:
		return cmpString(string(n.Protocol), string(o.Protocol))
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
