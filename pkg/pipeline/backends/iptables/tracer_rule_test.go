package iptables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
)

// rule evaluates one rule. Matches are read left to right; "statistic"
// and "recent --rcheck" fork the branch (one side matches, the other
// falls through to the next rule).
func (tr *tracer) rule(text string, p pkt) []branch {
	words := kiptables.SplitRule(text)
	var forks []branch
	neg := false
	for i := 0; i < len(words); i++ {
		word := words[i]
		arg := func() string {
			if i+1 >= len(words) {
				tr.t.Fatalf("tracer: %q lacks an argument in %q", word, text)
			}
			i++
			return words[i]
		}
		ok := true
		switch word {
		case "!":
			neg = true
			continue
		case "-m":
			if m := arg(); m == "comment" {
				i += 2 // --comment <text>
			}
			continue
		case "-p":
			ok = arg() == p.proto
		case "-s":
			ok = addrMatches(tr, arg(), p.src)
		case "-d":
			ok = addrMatches(tr, arg(), p.dst)
		case "-i":
			ok = ifaceMatches(arg(), p.iif)
		case "--dport":
			ok = arg() == strconv.Itoa(int(p.dport))
		case "--dst-type", "--src-type":
			if arg() != "LOCAL" {
				tr.t.Fatalf("tracer: addrtype %q", words[i])
			}
			a := p.dst
			if word == "--src-type" {
				a = p.src
			}
			ok = slices.Contains(tr.local, a)
		case "--mark":
			ok = markMatches(tr, arg(), p.mark)
		case "--ctstate":
			ok = ctMatches(arg(), p)
		case "--mode", "--nfacct-name", "--name", "--seconds":
			arg() // statistic mode, nfacct counter, recent list: no effect on the fate
			continue
		case "--probability", "--rcheck":
			if word == "--probability" {
				arg()
			}
			// Fork: this side does not match and goes to the next rule.
			forks = append(forks, branch{p: p, f: fNext})
			continue
		case "--reap", "--set":
			continue
		case "-j":
			return append(forks, tr.target(words[i+1:], p))
		default:
			tr.t.Fatalf("tracer: unknown word %q in %q", word, text)
		}
		if ok == neg {
			return append(forks, branch{p: p, f: fNext})
		}
		neg = false
	}
	return append(forks, branch{p: p, f: fNext}) // no target: a comment-only rule
}

// target applies "-j X ..." to p.
func (tr *tracer) target(words []string, p pkt) branch {
	switch words[0] {
	case "ACCEPT":
		return branch{p: p, f: fAccept}
	case "DROP":
		return branch{p: p, f: fDrop}
	case "REJECT":
		return branch{p: p, f: fReject}
	case "RETURN":
		return branch{p: p, f: fReturn}
	case "MASQUERADE":
		p.masq = true
		return branch{p: p, f: fAccept}
	case "DNAT":
		ap, err := netip.ParseAddrPort(words[2])
		if words[1] != "--to-destination" || err != nil {
			tr.t.Fatalf("tracer: bad DNAT %q", strings.Join(words, " "))
		}
		p.dst, p.dport, p.dnat = ap.Addr(), ap.Port(), true
		return branch{p: p, f: fAccept}
	case "MARK":
		v, err := strconv.ParseUint(words[2], 0, 32)
		if err != nil {
			tr.t.Fatalf("tracer: bad mark %q", words[2])
		}
		switch words[1] {
		case "--or-mark":
			p.mark |= uint32(v)
		case "--xor-mark":
			p.mark ^= uint32(v)
		default:
			tr.t.Fatalf("tracer: MARK %q", words[1])
		}
		return branch{p: p, f: fNext}
	}
	if strings.HasPrefix(words[0], "KUBE-") {
		return branch{p: p, f: fJump, target: words[0]}
	}
	tr.t.Fatalf("tracer: unknown target %q", words[0])
	return branch{}
}

func addrMatches(tr *tracer, s string, a netip.Addr) bool {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			tr.t.Fatalf("tracer: bad prefix %q", s)
		}
		return pfx.Contains(a)
	}
	b, err := netip.ParseAddr(s)
	if err != nil {
		tr.t.Fatalf("tracer: bad address %q", s)
	}
	return a == b
}

// ifaceMatches implements -i, where a trailing "+" matches any suffix.
func ifaceMatches(pattern, iif string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "+"); ok {
		return iif != "" && strings.HasPrefix(iif, prefix)
	}
	return iif == pattern
}

func markMatches(tr *tracer, s string, mark uint32) bool {
	vs, ms, _ := strings.Cut(s, "/")
	v, err1 := strconv.ParseUint(vs, 0, 32)
	m, err2 := strconv.ParseUint(ms, 0, 32)
	if err1 != nil || err2 != nil {
		tr.t.Fatalf("tracer: bad mark match %q", s)
	}
	return mark&uint32(m) == uint32(v)
}

// ctMatches: every traced packet opens a new connection; DNAT holds once
// the nat table rewrote the destination.
func ctMatches(states string, p pkt) bool {
	for _, s := range strings.Split(states, ",") {
		if s == "NEW" || (s == "DNAT" && p.dnat) {
			return true
		}
	}
	return false
}
