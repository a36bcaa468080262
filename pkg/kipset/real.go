package kipset

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Client is the real Interface over netlink.
type Client struct {
	h     *netlink.Handle
	raw   *rawSocket      // for the requests the library gets wrong (raw.go)
	types map[string]Type // set types learned from create and list
}

var _ Interface = (*Client)(nil)

// New returns a client for the ipsets of the network namespace at nsPath
// ("" for the caller's own). Close releases its sockets.
func New(nsPath string) (*Client, error) {
	ns := netns.None()
	if nsPath != "" {
		var err error
		if ns, err = netns.GetFromPath(nsPath); err != nil {
			return nil, fmt.Errorf("opening ipset netlink socket: %w", err)
		}
		defer ns.Close()
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening ipset netlink socket: %w", err)
	}
	raw, err := openRawSocket(ns)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("opening ipset netlink socket: %w", err)
	}
	return &Client{h: h, raw: raw, types: map[string]Type{}}, nil
}

// Close releases the netlink sockets.
func (c *Client) Close() {
	c.h.Close()
	c.raw.close()
}

// CreateSet is part of Interface.
func (c *Client) CreateSet(set Set) error {
	opts := netlink.IpsetCreateOptions{Family: unix.AF_INET}
	if set.Family == Inet6 {
		opts.Family = unix.AF_INET6
	}
	if set.Type == BitmapPort {
		opts.PortFrom, opts.PortTo = 0, 65535
	} else {
		opts.MaxElements = cmp.Or(set.MaxElements, DefaultMaxElements)
	}
	err := guard(func() error { return c.h.IpsetCreate(set.Name, string(set.Type), opts) })
	if err != nil {
		return wrap(err, "creating ipset "+set.Name, ErrExists)
	}
	c.types[set.Name] = set.Type
	return nil
}

// DestroySet is part of Interface.
func (c *Client) DestroySet(name string) error {
	if err := c.raw.execute(destroyRequest(name)); err != nil {
		return wrap(err, "destroying ipset "+name, ErrNotFound)
	}
	delete(c.types, name)
	return nil
}

// ListSets is part of Interface.
func (c *Client) ListSets() ([]Set, error) {
	var all []netlink.IPSetResult
	err := guard(func() (err error) { all, err = c.h.IpsetListAll(); return err })
	if err != nil {
		return nil, wrap(err, "listing ipsets", ErrNotFound)
	}
	sets := make([]Set, 0, len(all))
	for _, r := range all {
		set := Set{Name: r.SetName, Type: Type(r.TypeName)}
		if set.Type != BitmapPort {
			set.MaxElements = r.MaxElements
			set.Family = Inet
			if r.Family == unix.AF_INET6 {
				set.Family = Inet6
			}
		}
		sets = append(sets, set)
		c.types[r.SetName] = set.Type
	}
	return sets, nil
}

// SwapSets is part of Interface.
func (c *Client) SwapSets(a, b string) error {
	err := guard(func() error { return c.h.IpsetSwap(a, b) })
	if err != nil {
		return wrap(err, fmt.Sprintf("swapping ipsets %s and %s", a, b), ErrExists)
	}
	c.types[a], c.types[b] = c.types[b], c.types[a]
	return nil
}

// ListEntries is part of Interface.
func (c *Client) ListEntries(name string) ([]Entry, error) {
	var res *netlink.IPSetResult
	err := guard(func() (err error) { res, err = c.h.IpsetList(name); return err })
	if err != nil {
		return nil, wrap(err, "listing ipset "+name, ErrNotFound)
	}
	t := Type(res.TypeName)
	c.types[name] = t
	out := make([]Entry, 0, len(res.Entries))
	for _, raw := range res.Entries {
		out = append(out, fromNetlink(t, raw))
	}
	return out, nil
}

// AddEntry is part of Interface. Adding a present member is not an error.
func (c *Client) AddEntry(name string, e Entry) error {
	return c.change(nl.IPSET_CMD_ADD, name, e)
}

// DelEntry is part of Interface. Deleting an absent member is not an error.
func (c *Client) DelEntry(name string, e Entry) error {
	return c.change(nl.IPSET_CMD_DEL, name, e)
}

// change sends one ADD or DEL without NLM_F_EXCL (Replace in the
// library's terms), so the kernel treats a present member on add and an
// absent one on delete as success, as Fake does. A port-only entry can
// only belong to a bitmap:port set, whose request is built in raw.go.
func (c *Client) change(cmd int, name string, e Entry) error {
	what := fmt.Sprintf("%s %v in ipset %s", cmdName(cmd), e, name)
	t := c.types[name]
	if !e.IP.IsValid() && t == "" {
		t = BitmapPort
	}
	if err := validate(t, e); t != "" && err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var err error
	if t == BitmapPort {
		err = c.raw.execute(bitmapPortRequest(cmd, name, e.Port))
	} else {
		ne := toNetlink(e)
		ne.Replace = true
		err = guard(func() error {
			if cmd == nl.IPSET_CMD_ADD {
				return c.h.IpsetAdd(name, ne)
			}
			return c.h.IpsetDel(name, ne)
		})
	}
	if full(t, err) {
		return fmt.Errorf("%s: %w (%w)", what, ErrFull, err)
	}
	return wrap(err, what, ErrExists)
}

// full reports whether err is a hash set's "Hash is full" (the first
// type-specific error of the hash types; bitmap types use that number for
// something else).
func full(t Type, err error) bool {
	var ipsetErr nl.IPSetError
	return t != BitmapPort && errors.As(err, &ipsetErr) && int(ipsetErr) == nl.IPSET_ERR_TYPE_SPECIFIC
}

func toNetlink(e Entry) *netlink.IPSetEntry {
	ne := &netlink.IPSetEntry{}
	if e.IP.IsValid() {
		ne.IP = net.IP(e.IP.AsSlice())
	}
	if e.Port != 0 || e.Protocol != 0 {
		port, proto := e.Port, e.Protocol
		ne.Port = &port
		if proto != 0 {
			ne.Protocol = &proto
		}
	}
	switch {
	case e.IP2.IsValid():
		ne.IP2 = net.IP(e.IP2.AsSlice())
	case e.Net.IsValid():
		ne.IP2 = net.IP(e.Net.Addr().AsSlice())
		ne.CIDR2 = uint8(e.Net.Bits())
	}
	return ne
}

func fromNetlink(t Type, raw netlink.IPSetEntry) Entry {
	var e Entry
	if a, ok := netip.AddrFromSlice(raw.IP); ok && t != BitmapPort {
		e.IP = a.Unmap()
	}
	if raw.Port != nil {
		e.Port = *raw.Port
	}
	if raw.Protocol != nil && t != BitmapPort {
		e.Protocol = *raw.Protocol
	}
	if a, ok := netip.AddrFromSlice(raw.IP2); ok {
		switch t {
		case HashIPPortNet:
			e.Net = netip.PrefixFrom(a.Unmap(), int(raw.CIDR2))
		default:
			e.IP2 = a.Unmap()
		}
	}
	return e
}

// guard turns a panic inside the netlink library into an error: its ipset
// code type-asserts every failure to syscall.Errno, which panics on any
// other error (a dump interrupted, a socket error). A daemon must not die
// of that.
func guard(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("netlink ipset call failed: %v", r)
		}
	}()
	return call()
}

// wrap maps the kernel's errors to this package's; missing is ErrNotFound
// or ErrExists, what IPSET_ERR_EXIST means for the operation at hand.
func wrap(err error, what string, exist error) error {
	var ipsetErr nl.IPSetError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%s: %w (%w)", what, ErrNotFound, err)
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%s: %w (%w)", what, ErrExists, err)
	case errors.As(err, &ipsetErr) && int(ipsetErr) == nl.IPSET_ERR_EXIST:
		return fmt.Errorf("%s: %w (%w)", what, exist, err)
	case errors.As(err, &ipsetErr) && (int(ipsetErr) == nl.IPSET_ERR_BUSY || int(ipsetErr) == nl.IPSET_ERR_REFERENCED):
		return fmt.Errorf("%s: %w (%w)", what, ErrInUse, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
