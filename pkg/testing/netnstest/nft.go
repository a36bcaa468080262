package netnstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Monitor records the ruleset changes the kernel announces in one namespace,
// to check that an operation changed nothing, or to count what it changed.
// It subscribes to nf_tables' netlink notifications itself rather than run
// `nft monitor`, which (nft 1.0.6) spends seconds loading a large ruleset
// into its cache before it reports anything, and then sometimes nothing.
type Monitor struct {
	fd   int
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	events []string
	// txs are the notifications with the names of their objects, one
	// list per committed transaction (the kernel ends each with a new
	// generation); cur is the transaction being read.
	txs [][]string
	cur []string
}

// nf_tables notification message types (linux/netfilter/nf_tables.h).
var nftMsgNames = map[uint16]string{
	0: "add table", 2: "delete table", 3: "add chain", 5: "delete chain",
	6: "add rule", 8: "delete rule", 9: "add set", 11: "delete set",
	12: "add element", 14: "delete element", 18: "add object", 20: "delete object",
	22: "add flowtable", 24: "delete flowtable",
}

const (
	nfnlSubsysNFTables = 10
	nfnlGroupNFTables  = 7
	nftMsgNewGen       = 15
)

// StartNftMonitor subscribes to nf_tables notifications inside ns. The
// subscription is in place when it returns.
func (ns *NS) StartNftMonitor() (*Monitor, error) {
	m := &Monitor{fd: -1, stop: make(chan struct{}), done: make(chan struct{})}
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		m.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return err
		}
		// A big buffer so a full rewrite cannot overflow it unnoticed.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, nfnlGroupNFTables)
	})
	if err != nil {
		if m.fd >= 0 {
			unix.Close(m.fd)
		}
		return nil, fmt.Errorf("nf_tables monitor in %s: %w", ns.Role, err)
	}
	go m.read()
	return m, nil
}

func (m *Monitor) read() {
	defer close(m.done)
	buf := make([]byte, 1<<20)
	for {
		n, _, err := unix.Recvfrom(m.fd, buf, 0)
		select {
		case <-m.stop:
			if n <= 0 {
				return
			}
		default:
		}
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			m.record("monitor error: "+err.Error(), "") // ENOBUFS: events were lost
			continue
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			m.record("monitor error: "+err.Error(), "")
			continue
		}
		for _, msg := range msgs {
			if msg.Header.Type>>8 != nfnlSubsysNFTables {
				continue
			}
			typ := msg.Header.Type & 0xff
			if typ == nftMsgNewGen {
				m.endTransaction()
				continue
			}
			name, ok := nftMsgNames[typ]
			if !ok {
				name = fmt.Sprintf("nf_tables message %d", typ)
			}
			m.record(name, objectName(typ, msg.Data))
		}
	}
}

func (m *Monitor) record(event, object string) {
	m.mu.Lock()
	m.events = append(m.events, event)
	if object != "" {
		event += " " + object
	}
	m.cur = append(m.cur, event)
	m.mu.Unlock()
}

func (m *Monitor) endTransaction() {
	m.mu.Lock()
	if len(m.cur) > 0 {
		m.txs = append(m.txs, m.cur)
		m.cur = nil
	}
	m.mu.Unlock()
}

// nameAttr is, per notification type, the attribute that names its object
// (a rule's chain, an element's set): NFTA_TABLE_NAME, NFTA_CHAIN_NAME,
// NFTA_RULE_CHAIN, NFTA_SET_NAME, NFTA_SET_ELEM_LIST_SET, NFTA_OBJ_NAME.
var nameAttr = map[uint16]uint16{0: 1, 2: 1, 3: 3, 5: 3, 6: 2, 8: 2, 9: 2, 11: 2, 12: 2, 14: 2, 18: 2, 20: 2}

// objectName is the name of the object a notification is about, "" if not
// known. data is the message after its netlink header: the nfgenmsg, then
// attributes.
func objectName(typ uint16, data []byte) string {
	want, ok := nameAttr[typ]
	if !ok || len(data) < 4 {
		return ""
	}
	for b := data[4:]; len(b) >= 4; {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			return ""
		}
		if binary.NativeEndian.Uint16(b[2:])&0x3fff == want {
			return strings.TrimRight(string(b[4:l]), "\x00")
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return ""
}

// Stop ends the monitor (once; later calls only return) and returns one
// line per notification ("add rule", "delete element", ...), generation
// markers left out.
func (m *Monitor) Stop() []string {
	m.once.Do(func() {
		// Notifications are queued when the transaction commits; give
		// the reader one more receive timeout to drain them.
		time.Sleep(200 * time.Millisecond)
		close(m.stop)
		<-m.done
		unix.Close(m.fd)
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.events
}

// StopTransactions ends the monitor and returns the notifications one
// list per committed transaction, in order, each with the name of its
// object ("add set service-ips"; a rule's chain, an element's set).
func (m *Monitor) StopTransactions() [][]string {
	m.Stop()
	m.endTransaction()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.txs
}

// ListRuleset returns `nft -a list ruleset` in the namespace: with handles,
// so a chain or rule that was deleted and re-added shows up as a difference.
func (ns *NS) ListRuleset(ctx context.Context) (string, error) {
	out, err := ns.Run(ctx, "nft", "-a", "list", "ruleset")
	return string(out), err
}

// ListTables returns the lines of `nft list tables` in the namespace.
func (ns *NS) ListTables(ctx context.Context) ([]string, error) {
	out, err := ns.Run(ctx, "nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, l := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		if l != "" {
			tables = append(tables, l)
		}
	}
	return tables, nil
}
