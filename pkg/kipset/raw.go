package kipset

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The netlink library gets two requests wrong for our use, so they are
// built here (nfnetlink ipset protocol 6, the same wire form the ipset
// tool sends):
//
//   - ADD/DEL on a bitmap:port set: the library attaches IPSET_ATTR_PROTO
//     to every entry with a port (TCP when none is given), and the kernel's
//     bitmap:port type has no protocol in its policy and refuses the
//     request ("invalid protocol"), so no node port could ever be added.
//   - DESTROY: the library sends it without NLM_F_EXCL, which the kernel
//     reads as "-exist" and answers a missing set with success; callers
//     want ErrNotFound.

// rawSocket is a netlink socket of our own, opened in the client's
// namespace: the library's Handle keeps its sockets private.
type rawSocket struct {
	sh *nl.SocketHandle
}

func openRawSocket(ns netns.NsHandle) (*rawSocket, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, err
	}
	// Without timeouts a lost reply would hang the sync forever.
	tv := unix.Timeval{Sec: 10}
	if err := s.SetSendTimeout(&tv); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.SetReceiveTimeout(&tv); err != nil {
		s.Close()
		return nil, err
	}
	return &rawSocket{sh: &nl.SocketHandle{Socket: s}}, nil
}

func (r *rawSocket) close() { r.sh.Close() }

// execute sends req and waits for the kernel's ack; ipset's private
// errnos come back as nl.IPSetError, as the library reports them.
func (r *rawSocket) execute(req *nl.NetlinkRequest) error {
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: r.sh}
	_, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if errno, ok := err.(syscall.Errno); ok && int(errno) >= nl.IPSET_ERR_PRIVATE {
		return nl.IPSetError(uintptr(errno))
	}
	return err
}

// newRequest starts an ipset request: nfgenmsg header and protocol
// version. flags are added to NLM_F_REQUEST|NLM_F_ACK.
func newRequest(cmd, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(cmd|(unix.NFNL_SUBSYS_IPSET<<8), unix.NLM_F_ACK|flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: uint8(unix.AF_NETLINK), Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	return req
}

// destroyRequest removes set name; NLM_F_EXCL makes a missing set ENOENT.
func destroyRequest(name string) *nl.NetlinkRequest {
	req := newRequest(nl.IPSET_CMD_DESTROY, unix.NLM_F_EXCL)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name)))
	return req
}

// bitmapPortRequest adds (IPSET_CMD_ADD) or deletes (IPSET_CMD_DEL) one
// port of a bitmap:port set: the port, in network order, and nothing
// else. Without NLM_F_EXCL adding a present port or deleting an absent
// one succeeds, as for the other set types here.
func bitmapPortRequest(cmd int, name string, port uint16) *nl.NetlinkRequest {
	req := newRequest(cmd, 0)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name)))
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	var be [2]byte
	binary.BigEndian.PutUint16(be[:], port)
	data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT|int(nl.NLA_F_NET_BYTEORDER), be[:]))
	data.AddChild(&nl.Uint32Attribute{Type: nl.IPSET_ATTR_LINENO | nl.NLA_F_NET_BYTEORDER, Value: 0})
	req.AddData(data)
	return req
}

func cmdName(cmd int) string {
	switch cmd {
	case nl.IPSET_CMD_ADD:
		return "adding"
	case nl.IPSET_CMD_DEL:
		return "deleting"
	}
	return fmt.Sprintf("ipset command %d", cmd)
}
