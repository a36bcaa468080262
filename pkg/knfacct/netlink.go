package knfacct

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nfnetlink_acct message types and attributes
// (include/uapi/linux/netfilter/nfnetlink_acct.h).
const (
	msgNew      = 0 // NFNL_MSG_ACCT_NEW
	msgGet      = 1 // NFNL_MSG_ACCT_GET
	attrName    = 1 // NFACCT_NAME, NUL-terminated string
	attrPackets = 2 // NFACCT_PKTS, big-endian u64
	// attrTypeMask drops the NLA_F_NESTED and NLA_F_NET_BYTEORDER bits.
	attrTypeMask = 0x3fff
)

// ioTimeout bounds one request: a scrape must not hang on the kernel.
var ioTimeout = unix.Timeval{Sec: 5}

// Client talks nfnetlink_acct on one socket, opened in the network
// namespace of the thread that called New; it may then be used from any
// goroutine (a netlink socket keeps its namespace, and nl serializes
// requests on a shared socket).
type Client struct {
	handle *nl.SocketHandle
}

var _ Interface = (*Client)(nil)

// New opens a client in the calling thread's network namespace. It returns
// ErrNotSupported when the kernel has no nfacct subsystem, which it probes
// by looking up an object that need not exist.
func New() (*Client, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening the nfnetlink socket: %w", err)
	}
	c := &Client{handle: &nl.SocketHandle{Socket: s}}
	if err := errors.Join(s.SetSendTimeout(&ioTimeout), s.SetReceiveTimeout(&ioTimeout)); err != nil {
		c.Close()
		return nil, fmt.Errorf("setting nfnetlink socket timeouts: %w", err)
	}
	if _, err := c.Get("svcproxy-probe"); err != nil && !errors.Is(err, ErrNotFound) {
		c.Close()
		return nil, fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return c, nil
}

// Close closes the socket.
func (c *Client) Close() { c.handle.Close() }

// Ensure is part of Interface. It asks for creation without NLM_F_EXCL
// or NLM_F_REPLACE: the kernel then answers EBUSY for an existing object
// and leaves its counts alone, so one round trip suffices and two callers
// (the IPv4 and IPv6 proxiers) cannot race.
func (c *Client) Ensure(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	_, err := c.request(msgNew, unix.NLM_F_CREATE|unix.NLM_F_ACK, name)
	if err != nil && !errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("creating nfacct object %q: %w", name, err)
	}
	return nil
}

// Get is part of Interface.
func (c *Client) Get(name string) (uint64, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	msgs, err := c.request(msgGet, unix.NLM_F_ACK, name)
	if errors.Is(err, syscall.ENOENT) {
		return 0, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err != nil {
		return 0, fmt.Errorf("reading nfacct object %q: %w", name, err)
	}
	for _, m := range msgs {
		got, packets, err := decode(m)
		if err != nil {
			return 0, fmt.Errorf("reading nfacct object %q: %w", name, err)
		}
		if got == name {
			return packets, nil
		}
	}
	return 0, fmt.Errorf("reading nfacct object %q: no answer for it", name)
}

func (c *Client) request(msg int, flags int, name string) ([][]byte, error) {
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Len:   unix.SizeofNlMsghdr,
			Type:  uint16(unix.NFNL_SUBSYS_ACCT<<8 | msg),
			Flags: uint16(unix.NLM_F_REQUEST | flags),
		},
		Sockets: map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: c.handle},
	}
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(attrName, nl.ZeroTerminated(name)))
	return req.Execute(unix.NETLINK_NETFILTER, 0)
}

// decode reads an object's name and packet count from one reply (the
// nfgenmsg header, then attributes).
func decode(msg []byte) (name string, packets uint64, err error) {
	if len(msg) < nl.SizeofNfgenmsg {
		return "", 0, fmt.Errorf("short nfacct message (%d bytes)", len(msg))
	}
	attrs, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
	if err != nil {
		return "", 0, fmt.Errorf("parsing nfacct attributes: %w", err)
	}
	var havePackets bool
	for _, a := range attrs {
		switch a.Attr.Type & attrTypeMask {
		case attrName:
			v, _, _ := bytes.Cut(a.Value, []byte{0})
			name = string(v)
		case attrPackets:
			if len(a.Value) != 8 {
				return "", 0, fmt.Errorf("nfacct packet count of %d bytes", len(a.Value))
			}
			packets, havePackets = binary.BigEndian.Uint64(a.Value), true
		}
	}
	if name == "" || !havePackets {
		return "", 0, errors.New("nfacct message without name or packet count")
	}
	return name, packets, nil
}
