package knft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// Probes of any table, over netlink in the calling thread's network
// namespace, for callers that only need to know whether there is anything
// to do (start-up cleanup): a Kernel would first run nft (knftables.New
// checks the binary), these start no process.

// TableExists reports whether table exists in family.
func TableExists(family knftables.Family, table string) (bool, error) {
	c, err := dialNetfilter()
	if err != nil {
		return false, err
	}
	defer c.close()
	return (&Kernel{family: nfproto(family), table: table}).tableExists(c)
}

// ChainNames lists the chains of table in family (ip or ip6); a missing
// table has none.
func ChainNames(family knftables.Family, table string) ([]string, error) {
	c, err := dialNetfilter()
	if err != nil {
		return nil, err
	}
	defer c.close()
	var names []string
	err = c.listChains(nfproto(family), table, func(name string, _ *ChainHook) { names = append(names, name) })
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing chains of %s %s: %w", family, table, err)
	}
	return names, nil
}

// listChains reports the name of every chain of table, and the hook of
// each base chain.
func (c *nlConn) listChains(family uint8, table string, each func(name string, hook *ChainHook)) error {
	attrs := knetlink.AppendString(nil, unix.NFTA_CHAIN_TABLE, table)
	return c.request(unix.NFT_MSG_GETCHAIN, family, true, attrs, func(b []byte) error {
		if knetlink.CString(knetlink.Find(b, unix.NFTA_CHAIN_TABLE)) == table {
			each(knetlink.CString(knetlink.Find(b, unix.NFTA_CHAIN_NAME)), chainHook(b))
		}
		return nil
	})
}

// hookNames are the netfilter hooks of the ip and ip6 families by number
// (NF_INET_*), spelled as nft spells them.
var hookNames = [...]string{"prerouting", "input", "forward", "output", "postrouting", "ingress"}

// chainHook decodes a chain message's hook (NFTA_CHAIN_HOOK: hook number
// and priority, both big-endian) and type; the zero ChainHook for a
// regular chain.
func chainHook(b []byte) *ChainHook {
	nest := knetlink.Find(b, unix.NFTA_CHAIN_HOOK)
	num, prio := knetlink.Find(nest, unix.NFTA_HOOK_HOOKNUM), knetlink.Find(nest, unix.NFTA_HOOK_PRIORITY)
	if len(num) != 4 || len(prio) != 4 {
		return &ChainHook{}
	}
	h := &ChainHook{Type: knetlink.CString(knetlink.Find(b, unix.NFTA_CHAIN_TYPE)),
		Priority: int(int32(binary.BigEndian.Uint32(prio)))}
	if n := binary.BigEndian.Uint32(num); n < uint32(len(hookNames)) {
		h.Hook = hookNames[n]
	} else {
		h.Hook = strconv.FormatUint(uint64(n), 10)
	}
	return h
}
