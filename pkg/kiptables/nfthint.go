package kiptables

import "bytes"

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
// section needs it.
func withCacheHints(data []byte) []byte {
	var at []int // offsets just after the "*table\n" lines to hint
	var lines, start int
	names := map[string]struct{}{}
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data) - off
		}
		line := data[off : off+end]
		off += end + 1
		switch {
		case len(line) > 0 && line[0] == '*':
			lines, start = 0, min(off, len(data))
			clear(names)
		case bytes.Equal(line, []byte("COMMIT")):
			if lines*len(names) >= hintMinCost {
				at = append(at, start)
			}
		default:
			lines++
			addChainNames(names, line)
		}
	}
	if len(at) == 0 {
		return data
	}
	out := make([]byte, 0, len(data)+len(at)*len(listCmd))
	prev := 0
	for _, a := range at {
		out = append(append(out, data[prev:a]...), listCmd...)
		prev = a
	}
	return append(out, data[prev:]...)
}

// addChainNames adds the chain names iptables-nft-restore would list for
// one line: the chain of ":CHAIN ..." or "-A CHAIN ...", and the target
// after "-j".
func addChainNames(names map[string]struct{}, line []byte) {
	switch {
	case len(line) > 1 && line[0] == ':':
		name, _, _ := bytes.Cut(line[1:], []byte(" "))
		addName(names, name)
	case len(line) > 3 && line[0] == '-':
		_, rest, _ := bytes.Cut(line, []byte(" "))
		name, _, _ := bytes.Cut(rest, []byte(" "))
		addName(names, name)
		if i := bytes.LastIndex(line, []byte(" -j ")); i >= 0 {
			target, _, _ := bytes.Cut(line[i+4:], []byte(" "))
			addName(names, target)
		}
	}
}

func addName(names map[string]struct{}, name []byte) {
	if _, ok := names[string(name)]; !ok {
		names[string(name)] = struct{}{}
	}
}
