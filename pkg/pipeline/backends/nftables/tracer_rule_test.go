package nftables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// selector is one component of a match expression, e.g. "ip daddr".
type selector struct {
	words []string
	mod   int // numgen modulus
}

// readExpr reads a concatenation of selectors starting at toks[i].
func (tr *tracer) readExpr(toks []string, i int) ([]selector, int) {
	var sels []selector
	for {
		var s selector
		switch toks[i] {
		case "ip", "ip6", "meta", "th", "ct":
			s.words, i = toks[i:i+2], i+2
		case "iifname":
			s.words, i = toks[i:i+1], i+1
		case "fib":
			s.words, i = toks[i:i+3], i+3
		case "numgen":
			n, err := strconv.Atoi(toks[i+3])
			if err != nil {
				tr.t.Fatalf("tracer: numgen modulus %q", toks[i+3])
			}
			s.words, s.mod, i = toks[i:i+4], n, i+4
		default:
			tr.t.Fatalf("tracer: unknown expression at %q in %q", toks[i], strings.Join(toks, " "))
		}
		sels = append(sels, s)
		if i < len(toks) && toks[i] == "." {
			i++
			continue
		}
		return sels, i
	}
}

// values evaluates a concatenation; numgen yields every possible slot.
func (tr *tracer) values(sels []selector, p pkt) [][]string {
	alts := [][]string{nil}
	for _, s := range sels {
		var vals []string
		switch strings.Join(s.words, " ") {
		case tr.ip + " saddr":
			vals = []string{p.src.String()}
		case tr.ip + " daddr":
			vals = []string{p.dst.String()}
		case "meta l4proto":
			vals = []string{p.proto}
		case "th dport":
			vals = []string{itoa(p.dport)}
		case "meta mark":
			vals = []string{strconv.FormatUint(uint64(p.mark), 10)}
		case "iifname":
			vals = []string{p.iif}
		case "ct state":
			vals = []string{"new"}
		case "ct status":
			vals = []string{"none"}
			if p.dnat {
				vals = []string{"dnat"}
			}
		case "fib saddr type", "fib daddr type":
			a := p.src
			if s.words[1] == "daddr" {
				a = p.dst
			}
			vals = []string{"unicast"}
			if slices.Contains(tr.local, a) {
				vals = []string{"local"}
			}
		default:
			if s.mod == 0 {
				tr.t.Fatalf("tracer: unknown selector %q", s.words)
			}
			for n := range s.mod {
				vals = append(vals, strconv.Itoa(n))
			}
		}
		var next [][]string
		for _, a := range alts {
			for _, v := range vals {
				next = append(next, append(slices.Clone(a), v))
			}
		}
		alts = next
	}
	return alts
}

// lookup finds the element of set or map name whose key matches key.
func (tr *tracer) lookup(name string, key []string) (*knftElem, bool) {
	if s := tr.table.Sets[name]; s != nil {
		for _, e := range s.Elements {
			if keyMatches(key, e.Key) {
				return &knftElem{key: e.Key}, true
			}
		}
		return nil, false
	}
	m := tr.table.Maps[name]
	if m == nil {
		tr.t.Fatalf("tracer: no set or map %q", name)
	}
	for _, e := range m.Elements {
		if keyMatches(key, e.Key) {
			return &knftElem{key: e.Key, value: e.Value}, true
		}
	}
	return nil, false
}

type knftElem struct{ key, value []string }

// runRule evaluates one rule on p. Each returned branch either did not
// match (fNext, also when it matched without a verdict), or ended in one.
func (tr *tracer) runRule(rule string, p pkt) []branch {
	return tr.eval(tokenize(rule), 0, p)
}

func (tr *tracer) eval(toks []string, i int, p pkt) []branch {
	if i >= len(toks) {
		return []branch{{p: p, f: fNext}}
	}
	switch toks[i] {
	case "jump":
		return []branch{{p: p, f: fJump, target: toks[i+1]}}
	case "goto":
		return []branch{{p: p, f: fGoto, target: toks[i+1]}}
	case "return":
		return []branch{{p: p, f: fReturn}}
	case "drop":
		return []branch{{p: p, f: fDrop}}
	case "reject":
		return []branch{{p: p, f: fReject}}
	case "accept":
		return []branch{{p: p, f: fAccept}}
	case "masquerade":
		p.masq = true
		return []branch{{p: p, f: fAccept}}
	case "update": // update @set { ip saddr }: affinity bookkeeping only
		return tr.eval(toks, i+3, p)
	case "dnat":
		return tr.dnat(toks, i, p)
	}
	sels, j := tr.readExpr(toks, i)
	alts := tr.values(sels, p)
	var rhs string
	neg := false
	next := j + 1
	switch toks[j] {
	case "vmap":
		return tr.vmap(toks[j+1][1:], alts, p)
	case "set": // meta mark set meta mark or|xor V
		v := parseNum(tr, toks[j+4])
		if toks[j+3] == "or" {
			p.mark |= v
		} else {
			p.mark ^= v
		}
		return tr.eval(toks, j+5, p)
	case "&":
		mask, want := parseNum(tr, toks[j+1]), parseNum(tr, toks[j+3])
		if p.mark&mask == want {
			return tr.eval(toks, j+4, p)
		}
		return []branch{{p: p, f: fNext}}
	case "!=":
		neg, rhs, next = true, toks[j+1], j+2
	case "==":
		rhs, next = toks[j+1], j+2
	default:
		rhs = toks[j]
	}
	anyTrue, anyFalse := false, false
	for _, alt := range alts {
		if tr.matchRHS(alt, rhs) != neg {
			anyTrue = true
		} else {
			anyFalse = true
		}
	}
	var out []branch
	if anyTrue {
		out = tr.eval(toks, next, p)
	}
	if anyFalse {
		out = append(out, branch{p: p, f: fNext})
	}
	return out
}

func (tr *tracer) matchRHS(alt []string, rhs string) bool {
	switch {
	case strings.HasPrefix(rhs, "@"):
		_, ok := tr.lookup(rhs[1:], alt)
		return ok
	case strings.HasPrefix(rhs, "{"):
		return slices.ContainsFunc(groupItems(rhs), func(item string) bool { return valueMatches(alt[0], item) })
	}
	return len(alt) == 1 && valueMatches(alt[0], rhs)
}

func (tr *tracer) vmap(name string, alts [][]string, p pkt) []branch {
	var out []branch
	for _, alt := range alts {
		e, ok := tr.lookup(name, alt)
		if !ok {
			out = append(out, branch{p: p, f: fNext})
			continue
		}
		out = append(out, tr.eval(tokenize(strings.Join(e.value, " ")), 0, p)...)
	}
	return out
}

// dnat handles "dnat ip to ADDR:PORT", "dnat ip to EXPR map @m" and
// "dnat ip to EXPR map { k : v, … }".
func (tr *tracer) dnat(toks []string, i int, p pkt) []branch {
	if i+4 == len(toks) {
		ap, err := netip.ParseAddrPort(toks[i+3])
		if err != nil {
			tr.t.Fatalf("tracer: dnat target %q: %v", toks[i+3], err)
		}
		p.dst, p.dport, p.dnat = ap.Addr(), ap.Port(), true
		return []branch{{p: p, f: fAccept}}
	}
	sels, j := tr.readExpr(toks, i+3)
	if toks[j] != "map" {
		tr.t.Fatalf("tracer: dnat without map in %q", strings.Join(toks, " "))
	}
	lookup := func(key []string) (*knftElem, bool) { return tr.lookup(toks[j+1][1:], key) }
	if strings.HasPrefix(toks[j+1], "{") {
		lookup = func(key []string) (*knftElem, bool) { return inlineLookup(tr, toks[j+1], key) }
	}
	var out []branch
	for _, alt := range tr.values(sels, p) {
		e, ok := lookup(alt)
		if !ok {
			out = append(out, branch{p: p, f: fNext}) // a failed lookup breaks the rule
			continue
		}
		q := p
		port, err := strconv.Atoi(e.value[1])
		if err != nil {
			tr.t.Fatalf("tracer: endpoint port %q", e.value[1])
		}
		q.dst, q.dport, q.dnat = netip.MustParseAddr(e.value[0]), uint16(port), true
		out = append(out, branch{p: q, f: fAccept})
	}
	return out
}

// inlineLookup finds key in an inline map "{ k : v, … }" (keys and
// values concatenations joined by " . ").
func inlineLookup(tr *tracer, group string, key []string) (*knftElem, bool) {
	for _, item := range groupItems(group) {
		k, v, ok := strings.Cut(item, " : ")
		if !ok {
			tr.t.Fatalf("tracer: map item %q in %q", item, group)
		}
		if ks := splitElem(k); keyMatches(key, ks) {
			return &knftElem{key: ks, value: splitElem(v)}, true
		}
	}
	return nil, false
}

func parseNum(tr *tracer, s string) uint32 {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		tr.t.Fatalf("tracer: number %q: %v", s, err)
	}
	return uint32(v)
}
