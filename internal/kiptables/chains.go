package kiptables

import (
	"bytes"
	"context"
	"fmt"

	"github.com/google/nftables"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ChainNames is part of Interface. On iptables-nft it reads the names with
// one netlink chain dump: iptables-nft-save fetches every rule of every
// table (6 s for the nat table of 10k services × 10 endpoints) to print
// what a caller looking for chain names throws away. iptables-nft keeps
// each table as the nf_tables table of the same name in the family's ip
// or ip6 namespace. Elsewhere it parses iptables-save.
func (c *Client) ChainNames(ctx context.Context, table Table) ([]string, error) {
	if c.flavour != FlavourNFT {
		save, err := c.Save(ctx, table)
		if err != nil {
			return nil, err
		}
		return SavedChainNames(save), nil
	}
	fam := nftables.TableFamilyIPv4
	if c.family == proxy.IPv6 {
		fam = nftables.TableFamilyIPv6
	}
	// Not lasting: the socket is opened per call, in the calling thread's
	// network namespace, as the tools are.
	conn, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("netlink for the nf_tables chains of %s: %w", table, err)
	}
	chains, err := conn.ListChainsOfTableFamily(fam)
	if err != nil {
		return nil, fmt.Errorf("listing the nf_tables chains of %s: %w", table, err)
	}
	var names []string
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == string(table) {
			names = append(names, ch.Name)
		}
	}
	return names, nil
}

// SavedChainNames returns the chains iptables-save output declares.
func SavedChainNames(save []byte) []string {
	var names []string
	for _, line := range bytes.Split(save, []byte("\n")) {
		if len(line) > 1 && line[0] == ':' {
			name, _, _ := bytes.Cut(line[1:], []byte(" "))
			names = append(names, string(name))
		}
	}
	return names
}
