package kiptables

import (
	"bytes"
	"hash/maphash"
	"io"
)

// iptables-nft-restore --noflush (1.8.x, the version Debian bookworm and
// our image ship) decides what to fetch from the kernel by collecting the
// name of every chain a command mentions — the chain of each ":CHAIN"
// line and "-A", and each jump target — in a sorted linked list that it
// searches linearly (nft-cache.c, cache_chain_list_insert). A restore
// therefore costs O(commands × distinct chains): seconds of CPU for 1k
// services × 10 endpoints, and 10k did not finish in a quarter of an hour.
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

var commitLine = []byte("COMMIT")

// cacheHinter passes restore input through to w, with listCmd after the
// "*table" line of each section whose chain list would be expensive. It
// holds a section's lines back only until it knows: until their lines ×
// distinct names reach hintMinCost (then the hint, and the rest of the
// section passes straight through) or the section's COMMIT (no hint). So
// it holds the beginning of a large section — about a megabyte of a
// 10k-service sync — never the whole input, which its writer may be
// rendering piece by piece.
type cacheHinter struct {
	w        io.Writer
	seed     maphash.Seed
	atStart  bool // the next byte passed through begins a line
	inTable  bool // passing a "*table" line through
	deciding bool // holding the lines of a section's beginning
	held     []byte
	scanned  int // bytes of held already counted
	lines    int
	names    map[uint64]struct{} // hashes: only their number matters
}

func newCacheHinter(w io.Writer) *cacheHinter {
	return &cacheHinter{w: w, seed: maphash.MakeSeed(), atStart: true}
}

// Write is part of io.Writer.
func (h *cacheHinter) Write(p []byte) (int, error) {
	n := len(p)
	var err error
	for len(p) > 0 && err == nil {
		if h.deciding {
			p, err = h.hold(p)
		} else {
			p, err = h.pass(p)
		}
	}
	if err != nil {
		return n - len(p), err
	}
	return n, nil
}

// flush writes what is still held at the end of the input (a section
// without COMMIT, which the tool will refuse), its last line unfinished
// included.
func (h *cacheHinter) flush() error {
	if !h.deciding {
		return nil
	}
	rest, err := h.release(false)
	if err == nil {
		_, err = h.w.Write(rest)
	}
	return err
}

// pass writes p through up to the end of the next "*table" line, after
// which the section's lines are held; it returns the rest of p.
func (h *cacheHinter) pass(p []byte) ([]byte, error) {
	i := 0
	for i < len(p) {
		if h.atStart {
			h.inTable = p[i] == '*'
		}
		nl := bytes.IndexByte(p[i:], '\n')
		if nl < 0 {
			h.atStart = false
			i = len(p)
			break
		}
		i += nl + 1
		h.atStart = true
		if h.inTable {
			h.inTable, h.deciding = false, true
			h.lines, h.names = 0, map[uint64]struct{}{}
			break
		}
	}
	_, err := h.w.Write(p[:i])
	return p[i:], err
}

// hold keeps p while the section's beginning is counted, and lets it go
// once the decision is made; it returns what followed the decision.
func (h *cacheHinter) hold(p []byte) ([]byte, error) {
	h.held = append(h.held, p...)
	for {
		nl := bytes.IndexByte(h.held[h.scanned:], '\n')
		if nl < 0 {
			return nil, nil
		}
		line := h.held[h.scanned : h.scanned+nl]
		h.scanned += nl + 1
		if bytes.Equal(line, commitLine) {
			return h.release(false)
		}
		h.lines++
		addChainNames(h.names, h.seed, line)
		if h.lines*len(h.names) >= hintMinCost {
			return h.release(true)
		}
	}
}

// release writes the hint (if hint) and the held lines, and returns the
// held bytes past them, to be passed on.
func (h *cacheHinter) release(hint bool) ([]byte, error) {
	if hint {
		if _, err := h.w.Write(listCmd); err != nil {
			return nil, err
		}
	}
	done, rest := h.held[:h.scanned], h.held[h.scanned:]
	h.held, h.scanned, h.names, h.deciding = nil, 0, nil, false
	h.atStart = true
	_, err := h.w.Write(done)
	return rest, err
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
