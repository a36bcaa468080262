package kiptables

import (
	"bytes"
	"context"
)

// ChainNames is part of Interface; it parses iptables-save.
//
// On iptables-nft a netlink chain dump (GETCHAIN) looked cheaper than
// iptables-nft-save, which fetches every rule, but measured dearer: with
// github.com/google/nftables it took 8.5–10.9 s of kernel time for the
// 120k chains of 10k services × 10 endpoints, against 6 s for the save.
// The kernel restarts a chain dump from the table's first chain for every
// reply message, and that library reads with 4 KiB buffers, so the
// replies are small and many (quadratic); the iptables tools read 32 KiB.
func (c *Client) ChainNames(ctx context.Context, table Table) ([]string, error) {
	save, err := c.Save(ctx, table)
	if err != nil {
		return nil, err
	}
	return SavedChainNames(save), nil
}

// SavedChainNames returns the chains iptables-save output declares. It
// walks the lines in place: splitting the nat table of 10k services would
// allocate half a million slice headers.
func SavedChainNames(save []byte) []string {
	var names []string
	eachLine([][]byte{save}, func(line []byte, _ int) {
		if len(line) > 1 && line[0] == ':' {
			name, _, _ := bytes.Cut(line[1:], []byte(" "))
			names = append(names, string(name))
		}
	})
	return names
}
