package kiptables

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Reads of what each flavour holds, from the kernel itself, in the calling
// thread's network namespace: no tool runs, no module is loaded. A caller
// that only needs to know whether a tool has anything to do (start-up
// cleanup) asks these first.

// procDir is the calling thread's /proc/net: /proc/net is the process's
// (its main thread's) namespace, not the one a locked thread entered.
var procDir = "/proc/thread-self/net"

// LegacyTables lists the tables iptables-legacy has in family: the
// kernel's ip_tables_names (ip6_tables_names). The file exists only while
// the x_tables module of the family is loaded, and a table only once
// something used it in this namespace; no file, no table.
func LegacyTables(family proxy.IPFamily) ([]Table, error) {
	name := "ip_tables_names"
	if family == proxy.IPv6 {
		name = "ip6_tables_names"
	}
	b, err := os.ReadFile(procDir + "/" + name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the legacy iptables tables: %w", err)
	}
	var tables []Table
	for _, line := range bytes.Fields(b) {
		tables = append(tables, Table(line))
	}
	return tables, nil
}

// NFTChains lists the chains iptables-nft has in table of family: the
// chains of the nf_tables table of that name in family ip (ip6), read
// over netlink. A missing table has none.
func NFTChains(family proxy.IPFamily, table Table) ([]string, error) {
	nftFamily := knftables.IPv4Family
	if family == proxy.IPv6 {
		nftFamily = knftables.IPv6Family
	}
	return knft.ChainNames(nftFamily, string(table))
}
