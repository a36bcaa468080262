package kipvs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/moby/ipvs"
)

// client is Interface over a moby/ipvs netlink handle.
type client struct {
	h *ipvs.Handle
}

// New returns a client for the IPVS table of the network namespace at
// nsPath ("" for the caller's own namespace). Close releases its socket.
func New(nsPath string) (*Client, error) {
	h, err := ipvs.New(nsPath)
	if err != nil {
		return nil, fmt.Errorf("opening IPVS netlink socket: %w", err)
	}
	return &Client{client{h: h}}, nil
}

// Client is the real Interface, with Close.
type Client struct{ client }

// Close releases the netlink socket.
func (c *Client) Close() { c.h.Close() }

func (c *client) ListServices() ([]Service, error) {
	raw, err := c.h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("listing IPVS services: %w", err)
	}
	out := make([]Service, 0, len(raw))
	for _, s := range raw {
		if s.FWMark != 0 {
			continue // fwmark services have no address key; not ours
		}
		addr, ok := netip.AddrFromSlice(s.Address)
		if !ok {
			continue
		}
		out = append(out, Service{
			ServiceKey: ServiceKey{Addr: addr.Unmap(), Protocol: Protocol(s.Protocol), Port: s.Port},
			Scheduler:  s.SchedName,
			Flags:      s.Flags &^ flagHashed,
			Timeout:    s.Timeout,
		})
	}
	return out, nil
}

func (c *client) AddService(svc Service) error {
	return wrap(c.h.NewService(toIPVS(svc)), "adding IPVS service "+svc.String())
}

func (c *client) UpdateService(svc Service) error {
	return wrap(c.h.UpdateService(toIPVS(svc)), "updating IPVS service "+svc.String())
}

func (c *client) DeleteService(key ServiceKey) error {
	return wrap(c.h.DelService(toIPVS(Service{ServiceKey: key})), "deleting IPVS service "+key.String())
}

func (c *client) ListDestinations(key ServiceKey) ([]DestinationStatus, error) {
	raw, err := c.h.GetDestinations(toIPVS(Service{ServiceKey: key}))
	if err != nil {
		return nil, wrap(err, "listing destinations of IPVS service "+key.String())
	}
	out := make([]DestinationStatus, 0, len(raw))
	for _, d := range raw {
		addr, ok := netip.AddrFromSlice(d.Address)
		if !ok {
			continue
		}
		out = append(out, DestinationStatus{
			Destination:   Destination{Addr: netip.AddrPortFrom(addr.Unmap(), d.Port), Weight: d.Weight},
			ActiveConns:   d.ActiveConnections,
			InactiveConns: d.InactiveConnections,
		})
	}
	return out, nil
}

func (c *client) AddDestination(key ServiceKey, dst Destination) error {
	return wrap(c.h.NewDestination(toIPVS(Service{ServiceKey: key}), toIPVSDest(dst)),
		"adding destination "+dst.Addr.String()+" to IPVS service "+key.String())
}

func (c *client) UpdateDestination(key ServiceKey, dst Destination) error {
	return wrap(c.h.UpdateDestination(toIPVS(Service{ServiceKey: key}), toIPVSDest(dst)),
		"updating destination "+dst.Addr.String()+" of IPVS service "+key.String())
}

func (c *client) DeleteDestination(key ServiceKey, addr netip.AddrPort) error {
	return wrap(c.h.DelDestination(toIPVS(Service{ServiceKey: key}), toIPVSDest(Destination{Addr: addr})),
		"deleting destination "+addr.String()+" of IPVS service "+key.String())
}

func (c *client) SetTimeouts(t Timeouts) error {
	err := c.h.SetConfig(&ipvs.Config{TimeoutTCP: t.TCP, TimeoutTCPFin: t.TCPFin, TimeoutUDP: t.UDP})
	return wrap(err, "setting IPVS timeouts")
}

// toIPVS converts svc. The netmask matters for persistence only: a full
// mask makes each client address its own persistence group.
func toIPVS(svc Service) *ipvs.Service {
	s := &ipvs.Service{
		Address:   net.IP(svc.Addr.AsSlice()),
		Protocol:  uint16(svc.Protocol),
		Port:      svc.Port,
		SchedName: svc.Scheduler,
		Flags:     svc.Flags,
		Timeout:   svc.Timeout,
	}
	if svc.Addr.Is4() {
		s.AddressFamily, s.Netmask = syscall.AF_INET, 0xffffffff
	} else {
		s.AddressFamily, s.Netmask = syscall.AF_INET6, 128
	}
	return s
}

func toIPVSDest(d Destination) *ipvs.Destination {
	family := uint16(syscall.AF_INET)
	if d.Addr.Addr().Is6() {
		family = syscall.AF_INET6
	}
	return &ipvs.Destination{
		Address:         net.IP(d.Addr.Addr().AsSlice()),
		Port:            d.Addr.Port(),
		Weight:          d.Weight,
		ConnectionFlags: ipvs.ConnFwdMasq,
		AddressFamily:   family,
	}
}

// wrap maps the kernel's errnos to ErrNotFound and ErrExists and adds
// context.
func wrap(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%s: %w (%w)", what, ErrNotFound, err)
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%s: %w (%w)", what, ErrExists, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
