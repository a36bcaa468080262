package kiptables

import (
	"bytes"
	"hash/maphash"
)

// iptables-nft-restore --noflush (1.8.x, the version Debian bookworm and
// our image ship) decides what to fetch from the kernel by collecting the
// name of every chain a command mentions — the chain of each ":CHAIN"
// line and "-A", and each jump target — in a sorted linked list that it
// searches linearly (nft-cache.c, cache_chain_list_insert). A restore
// therefore costs O(commands × distinct chains): 8.7 s of CPU for 1k
// services × 10 endpoints, and 10k did not finish in 15 minutes.
//
// The list is abandoned (req->all_chains) as soon as one command names no
// chain; the cache then holds the whole table, fetched with a few dumps.
// Of the chain-less commands, only the listing ones read without writing
// (-F, -Z and -X would flush, zero or delete other programs' chains), so
// a section with many chain names gets "-L -n" as its first command: it
// prints the table as it was before the section (to /dev/null, see
// Restore) and changes nothing. "-n" keeps it from resolving addresses.
//
// Listing costs a dump of the whole table, which for a small section in a
// large table (a partial sync) is dearer than the list, so the hint is
// only given when the list would be long.
var listCmd = []byte("-L -n\n")

// hintMinCost is lines × distinct chain names above which a section gets
// the hint. The list costs about lines × names / 2 string comparisons
// (~20 ns each); 50M of them is ~0.5 s, about the price of dumping a
// 100k-rule table.
const hintMinCost = 50_000_000

// withCacheHints returns data with listCmd after the "*table" line of each
// section whose chain list would be expensive, or data itself when no
// section needs it. The chunks are sliced around the hints, not copied.
func withCacheHints(data [][]byte) [][]byte {
	var at []int // offsets just after the "*table\n" lines to hint
	var lines, start int
	names := map[uint64]struct{}{}
	seed := maphash.MakeSeed()
	eachLine(data, func(line []byte, off int) {
		switch {
		case len(line) > 0 && line[0] == '*':
			lines, start = 0, off
			clear(names)
		case bytes.Equal(line, []byte("COMMIT")):
			if lines*len(names) >= hintMinCost {
				at = append(at, start)
			}
		default:
			lines++
			addChainNames(names, seed, line)
		}
	})
	if len(at) == 0 {
		return data
	}
	return splice(data, at, listCmd)
}

// eachLine calls fn with each line of the chunks' concatenation (without
// its newline; a line may span chunks) and the offset just past it.
func eachLine(chunks [][]byte, fn func(line []byte, off int)) {
	var carry []byte // a line begun in an earlier chunk
	off := 0
	for _, c := range chunks {
		for len(c) > 0 {
			end := bytes.IndexByte(c, '\n')
			if end < 0 {
				carry = append(carry, c...)
				off += len(c)
				break
			}
			line := c[:end]
			if carry != nil {
				line = append(carry, line...)
				carry = nil
			}
			off += end + 1
			c = c[end+1:]
			fn(line, off)
		}
	}
	if len(carry) > 0 {
		fn(carry, off)
	}
}

// splice returns chunks with ins inserted at each offset of at (ascending,
// at most the chunks' total length).
func splice(chunks [][]byte, at []int, ins []byte) [][]byte {
	out := make([][]byte, 0, len(chunks)+2*len(at))
	base := 0 // offset of c's first byte
	for _, c := range chunks {
		for len(at) > 0 && at[0] <= base+len(c) {
			cut := at[0] - base
			out = append(out, c[:cut], ins)
			c, base, at = c[cut:], at[0], at[1:]
		}
		out = append(out, c)
		base += len(c)
	}
	for range at {
		out = append(out, ins)
	}
	return out
}

// addChainNames adds the chain names iptables-nft-restore would list for
// one line: the chain of ":CHAIN ..." or "-A CHAIN ...", and the target
// after "-j". It adds their hashes: only their number matters, and at
// 10k services the 120k names would take ~10 MB as strings.
func addChainNames(names map[uint64]struct{}, seed maphash.Seed, line []byte) {
	switch {
	case len(line) > 1 && line[0] == ':':
		name, _, _ := bytes.Cut(line[1:], []byte(" "))
		names[maphash.Bytes(seed, name)] = struct{}{}
	case len(line) > 3 && line[0] == '-':
		_, rest, _ := bytes.Cut(line, []byte(" "))
		name, _, _ := bytes.Cut(rest, []byte(" "))
		names[maphash.Bytes(seed, name)] = struct{}{}
		if i := bytes.LastIndex(line, []byte(" -j ")); i >= 0 {
			target, _, _ := bytes.Cut(line[i+4:], []byte(" "))
			names[maphash.Bytes(seed, target)] = struct{}{}
		}
	}
}
