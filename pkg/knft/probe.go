package knft

import (
	"errors"
	"fmt"

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
	err = c.listChains(nfproto(family), table, func(name string) { names = append(names, name) })
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing chains of %s %s: %w", family, table, err)
	}
	return names, nil
}

// listChains reports the name of every chain of table.
func (c *nlConn) listChains(family uint8, table string, each func(name string)) error {
	attrs := knetlink.AppendString(nil, unix.NFTA_CHAIN_TABLE, table)
	return c.request(unix.NFT_MSG_GETCHAIN, family, true, attrs, func(b []byte) error {
		if knetlink.CString(knetlink.Find(b, unix.NFTA_CHAIN_TABLE)) == table {
			each(knetlink.CString(knetlink.Find(b, unix.NFTA_CHAIN_NAME)))
		}
		return nil
	})
}
