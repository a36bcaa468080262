package kiptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// ListEnsuring is part of Interface. The tool prints each listed chain's
// rules ("-S CHAIN") after a line naming the chain ("-P CHAIN POLICY" for
// a built-in chain, "-N CHAIN" for another), which tells one table's
// OUTPUT from another's.
func (c *Client) ListEnsuring(ctx context.Context, req []ListRequest) (map[Table][]byte, error) {
	var in bytes.Buffer
	for _, r := range req {
		in.WriteString("*" + string(r.Table) + "\n")
		for _, chain := range r.Empty {
			in.WriteString(":" + chain + " - [0:0]\n")
		}
		for _, chain := range r.List {
			in.WriteString("-S " + chain + "\n")
		}
		in.WriteString("COMMIT\n")
	}
	var out bytes.Buffer
	stdin := func(w io.Writer) error {
		_, err := w.Write(in.Bytes())
		return err
	}
	args := append(append([]string{}, lockArgs...), "--noflush")
	err := c.runRetrying(ctx, c.restore, args, stdin, func() io.Writer {
		out.Reset()
		return &out
	})
	if err != nil {
		return nil, fmt.Errorf("listing the built-in chains: %w", err)
	}
	return splitListing(out.Bytes(), req)
}

// splitListing assigns each rule of the tool's -S output to the table of
// the chain listed.
func splitListing(out []byte, req []ListRequest) (map[Table][]byte, error) {
	type listed struct {
		table Table
		chain string
	}
	var order []listed
	for _, r := range req {
		for _, chain := range r.List {
			order = append(order, listed{r.Table, chain})
		}
	}
	res := map[Table][]byte{}
	k := -1
	for rest := out; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if bytes.HasPrefix(line, []byte("-P ")) || bytes.HasPrefix(line, []byte("-N ")) {
			k++
			name, _, _ := bytes.Cut(line[3:], []byte(" "))
			if k >= len(order) || string(name) != order[k].chain {
				return nil, fmt.Errorf("unexpected listing line %q", line)
			}
			continue
		}
		if k < 0 || len(line) == 0 {
			return nil, fmt.Errorf("unexpected listing line %q", line)
		}
		res[order[k].table] = append(append(res[order[k].table], line...), '\n')
	}
	if k+1 != len(order) {
		return nil, fmt.Errorf("listed %d chains of %d", k+1, len(order))
	}
	return res, nil
}

// MissingChain is part of Interface. Each table's part lists its OUTPUT
// chain, which every table has, then chain: where the tool stops tells
// which table lacks chain, and a run that stopped before printing a
// table's OUTPUT failed for another reason (the tool, the lock, the
// table). iptables-legacy is run with --test, which makes its COMMITs
// write nothing; iptables-nft skips the listing commands under --test,
// and its COMMIT of no change sends the kernel nothing to apply.
func (c *Client) MissingChain(ctx context.Context, chain string, tables []Table) (Table, error) {
	var in bytes.Buffer
	for _, t := range tables {
		in.WriteString("*" + string(t) + "\n-S " + ChainOutput + "\n-S " + chain + "\nCOMMIT\n")
	}
	args := append(append([]string{}, lockArgs...), "--noflush")
	if c.flavour != FlavourNFT {
		args = append(args, "--test")
	}
	var out bytes.Buffer
	err := c.runRetrying(ctx, c.restore, args, func(w io.Writer) error {
		_, err := w.Write(in.Bytes())
		return err
	}, func() io.Writer {
		out.Reset()
		return &out
	})
	missing, perr := stoppedAt(out.Bytes(), chain, tables, err != nil)
	if perr != nil {
		if err != nil {
			return "", fmt.Errorf("listing chain %s: %w", chain, err)
		}
		return "", fmt.Errorf("listing chain %s: %w", chain, perr)
	}
	return missing, nil
}

// stoppedAt reads MissingChain's listing: the table whose OUTPUT was the
// last header printed by a run that failed lacks chain; a run that
// succeeded listed chain in every table.
func stoppedAt(out []byte, chain string, tables []Table, failed bool) (Table, error) {
	var heads []string
	for rest := out; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if bytes.HasPrefix(line, []byte("-P ")) || bytes.HasPrefix(line, []byte("-N ")) {
			name, _, _ := bytes.Cut(line[3:], []byte(" "))
			heads = append(heads, string(name))
		}
	}
	for i, h := range heads {
		if want := []string{ChainOutput, chain}[i%2]; h != want || i/2 >= len(tables) {
			return "", fmt.Errorf("unexpected listing header %q", h)
		}
	}
	switch {
	case !failed && len(heads) == 2*len(tables):
		return "", nil
	case failed && len(heads)%2 == 1:
		return tables[len(heads)/2], nil
	case failed:
		return "", errors.New("the tool failed before a table was read")
	}
	return "", fmt.Errorf("listed %d chains of %d", len(heads), 2*len(tables))
}
