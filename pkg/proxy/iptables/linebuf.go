package iptables

import "hash/maphash"

// lineBuffer accumulates iptables-restore lines. Rendering 10k services
// writes about a million words; appending to one byte slice, with no fmt
// and no per-line allocation, keeps that to milliseconds.
type lineBuffer struct {
	b     []byte
	lines int
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
}

// chainLine declares (or, with --noflush, flushes) chain.
func (l *lineBuffer) chainLine(chain string) {
	l.b = append(l.b, ':')
	l.b = append(l.b, chain...)
	l.b = append(l.b, " - [0:0]\n"...)
}

// chunks is restore input made of pieces rendered elsewhere — mostly the
// Proxier's per-port lines — referenced rather than copied: at 10k services
// a sync's input is ~35 MB, and joining it cost a copy or two of that.
type chunks struct {
	parts [][]byte
	lines int
}

func (c *chunks) add(l *lineBuffer) {
	if len(l.b) > 0 {
		c.parts = append(c.parts, l.b)
		c.lines += l.lines
	}
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
