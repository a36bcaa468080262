package app

import (
	"fmt"
	"net"

	netutils "k8s.io/utils/net"
)

// The flag value types below reproduce upstream's (pkg/util/flag IPVar and
// IPPortVar, the internal ProxyMode and LocalMode): the same type names in
// --help, the same checks at parse time, and an empty value that leaves the
// default in place instead of clearing it.

// ipVar is --bind-address: an IP; "" keeps the default.
type ipVar struct{ val *string }

func (v ipVar) Type() string   { return "ip" }
func (v ipVar) String() string { return *v.val }
func (v ipVar) Set(s string) error {
	if s == "" {
		return nil
	}
	if netutils.ParseIPSloppy(s) == nil {
		return fmt.Errorf("%q is not a valid IP address", s)
	}
	*v.val = s
	return nil
}

// ipPortVar is --healthz-bind-address and --metrics-bind-address: an IP or
// IP:port; "" keeps the default. A bare IP gets its port appended later,
// by the defaulting of the resolved config.
type ipPortVar struct{ val *string }

func (v ipPortVar) Type() string   { return "ipport" }
func (v ipPortVar) String() string { return *v.val }
func (v ipPortVar) Set(s string) error {
	if s == "" {
		return nil
	}
	if netutils.ParseIPSloppy(s) != nil {
		*v.val = s
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not in a valid format (ip or ip:port): %w", s, err)
	}
	if netutils.ParseIPSloppy(host) == nil {
		return fmt.Errorf("%q is not a valid IP address", host)
	}
	if _, err := netutils.ParsePort(port, true); err != nil {
		return fmt.Errorf("%q is not a valid number", port)
	}
	*v.val = s
	return nil
}

// namedStringVar is a string flag whose --help type is typeName
// (--proxy-mode is "ProxyMode", --detect-local-mode "LocalMode").
type namedStringVar[T ~string] struct {
	val      *T
	typeName string
}

func (v namedStringVar[T]) Type() string   { return v.typeName }
func (v namedStringVar[T]) String() string { return string(*v.val) }
func (v namedStringVar[T]) Set(s string) error {
	*v.val = T(s)
	return nil
}
