package iptables

import (
	"hash/maphash"
	"io"
)

// lineBuffer accumulates iptables-restore lines. Rendering 10k services
// writes about a million words; appending to byte slices, with no fmt and
// no per-line allocation, keeps that to milliseconds. A buffer that grows
// past blockSize continues in a new block instead of growing its slice:
// the ~30 MB of a 10k-service sync's chains, grown by append, cost five
// times their size in allocations and a peak of twice their size. A
// buffer with a sink writes each block to it when full and reuses it: a
// full sync renders its ports' chains as the tool reads them.
type lineBuffer struct {
	full  [][]byte // blocks filled, before b
	b     []byte
	lines int
	sink  io.Writer
	err   error // the sink's first error
}

// streamTo returns a lineBuffer that writes its blocks to w.
func streamTo(w io.Writer) *lineBuffer {
	return &lineBuffer{sink: w, b: make([]byte, 0, blockSize+4<<10)}
}

// blockSize is where a lineBuffer starts a new block (at a line's end).
const blockSize = 256 << 10

// endLine finishes a line: the block is closed (or written to the sink)
// once it is full.
func (l *lineBuffer) endLine() {
	switch {
	case len(l.b) < blockSize:
	case l.sink != nil:
		l.flush()
	default:
		l.full = append(l.full, l.b)
		l.b = make([]byte, 0, blockSize+4<<10) // room for the line that overflows it
	}
}

// flush writes the block to the sink and empties it for reuse; after an
// error it only empties it (the tool has failed; Sync reports why).
func (l *lineBuffer) flush() {
	if l.err == nil && len(l.b) > 0 {
		_, l.err = l.sink.Write(l.b)
	}
	l.b = l.b[:0]
}

// bytes is the text written, as chunks of restore input.
func (l *lineBuffer) bytes() [][]byte {
	if len(l.b) == 0 {
		return l.full
	}
	return append(l.full[:len(l.full):len(l.full)], l.b)
}

// line writes words separated by spaces and a newline.
func (l *lineBuffer) line(words ...string) {
	for i, w := range words {
		if i > 0 {
			l.b = append(l.b, ' ')
		}
		l.b = append(l.b, w...)
	}
	l.b = append(l.b, '\n')
	l.lines++
	l.endLine()
}

// rule writes "-A chain" followed by groups of words; groups let callers
// splice optional matches without building a slice.
func (l *lineBuffer) rule(chain string, groups ...[]string) {
	l.b = append(l.b, "-A "...)
	l.b = append(l.b, chain...)
	for _, g := range groups {
		for _, w := range g {
			l.b = append(l.b, ' ')
			l.b = append(l.b, w...)
		}
	}
	l.b = append(l.b, '\n')
	l.lines++
	l.endLine()
}

// chainLine declares (or, with --noflush, flushes) chain.
func (l *lineBuffer) chainLine(chain string) {
	l.b = append(l.b, ':')
	l.b = append(l.b, chain...)
	l.b = append(l.b, " - [0:0]\n"...)
	l.endLine()
}

// chunks is restore input made of pieces rendered elsewhere — mostly the
// Proxier's per-port lines — referenced rather than copied: at 10k services
// a sync's input is ~35 MB, and joining it cost a copy or two of that.
type chunks struct {
	parts [][]byte
	lines int
}

func (c *chunks) add(l *lineBuffer) {
	c.parts = append(c.parts, l.bytes()...)
	c.lines += l.lines
}

func (c *chunks) addChunks(o *chunks) {
	c.parts = append(c.parts, o.parts...)
	c.lines += o.lines
}

// sum hashes the text, so that a later sync can tell whether it changed
// without keeping it. The seed is random per process, so no input can be
// crafted to collide.
func (c *chunks) sum(seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, p := range c.parts {
		_, _ = h.Write(p)
	}
	return h.Sum64()
}

// w groups words for rule.
func w(words ...string) []string { return words }

// quoted wraps a comment with spaces in double quotes, as
// iptables-restore wants and iptables-save prints it.
func quoted(s string) string { return `"` + s + `"` }
