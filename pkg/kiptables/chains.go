package kiptables

import (
	"bytes"
	"context"
	"io"
)

// ChainNames is part of Interface; it parses iptables-save.
//
// On iptables-nft a netlink chain dump (GETCHAIN) looked cheaper than
// iptables-nft-save, which fetches every rule, but measured dearer: with
// github.com/google/nftables the dump of the 120k chains of 10k services ×
// 10 endpoints took more kernel time than the whole save.
// The kernel restarts a chain dump from the table's first chain for every
// reply message, and that library reads with 4 KiB buffers, so the
// replies are small and many (quadratic); the iptables tools read 32 KiB.
//
// The output is parsed as it arrives: held whole, the nat table of 10k
// services (~40 MB, in a buffer grown by doubling) was the daemon's
// largest allocation at a restart.
func (c *Client) ChainNames(ctx context.Context, table Table) ([]string, error) {
	var names *chainNames
	err := c.saveTo(ctx, table, func() io.Writer {
		names = newChainNames()
		return names
	})
	if err != nil {
		return nil, err
	}
	return names.done(), nil
}

// SavedChainNames returns the chains iptables-save output declares.
func SavedChainNames(save []byte) []string {
	names := newChainNames()
	_, _ = names.Write(save)
	return names.done()
}

// chainNames collects the chains declared by iptables-save output written
// to it in pieces of any size.
type chainNames struct {
	names []string
	lines lineWriter
}

func newChainNames() *chainNames {
	c := &chainNames{}
	c.lines.fn = c.line
	return c
}

func (c *chainNames) Write(p []byte) (int, error) { return c.lines.Write(p) }

func (c *chainNames) line(line []byte) {
	if len(line) > 1 && line[0] == ':' {
		name, _, _ := bytes.Cut(line[1:], []byte(" "))
		c.names = append(c.names, string(name))
	}
}

// done returns the names, the unfinished last line included.
func (c *chainNames) done() []string {
	c.lines.done()
	return c.names
}

// lineWriter passes each line written to it, in pieces of any size, to fn
// (without its newline).
type lineWriter struct {
	fn    func(line []byte)
	carry []byte // the start of a line the last Write left unfinished
}

func (l *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		end := bytes.IndexByte(p, '\n')
		if end < 0 {
			l.carry = append(l.carry, p...)
			break
		}
		line := p[:end]
		if len(l.carry) > 0 {
			line = append(l.carry, line...)
			l.carry = l.carry[:0]
		}
		l.fn(line)
		p = p[end+1:]
	}
	return n, nil
}

// done passes the unfinished last line, if any.
func (l *lineWriter) done() {
	if len(l.carry) > 0 {
		l.fn(l.carry)
	}
	l.carry = nil
}
