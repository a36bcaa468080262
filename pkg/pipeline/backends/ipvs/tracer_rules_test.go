package ipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// packet is what the rule evaluator looks at.
type packet struct {
	src, dst netip.Addr
	proto    proxy.Protocol
	dport    uint16
	inIface  string
	mark     uint32
}

// ruleEval interprets the iptables rules held by a kiptables.Fake, with the
// ipsets of a kipset.Fake. It knows exactly the matches and targets this
// backend writes and fails loudly on anything else, so a rule it cannot
// read is a test failure rather than a silent pass.
type ruleEval struct {
	ipt   *kiptables.Fake
	sets  *kipset.Fake
	local []netip.Addr // addresses of type LOCAL (host and dummy link)
}

// outcome of a chain: "" (fell through or RETURN) or a terminal verdict.
type outcome string

func (e *ruleEval) chain(table kiptables.Table, name string, pkt *packet) (outcome, error) {
	t := e.ipt.Table(table)
	c := t.Chains[name]
	if c == nil {
		return "", fmt.Errorf("no chain %s %s", table, name)
	}
	for _, rule := range c.Rules {
		words := kiptables.SplitRule(rule)
		ok, target, err := e.match(words, pkt)
		if err != nil {
			return "", fmt.Errorf("%s %s %q: %w", table, name, rule, err)
		}
		if !ok {
			continue
		}
		switch target[0] {
		case "RETURN":
			return "", nil
		case "ACCEPT", "DROP", "REJECT", "MASQUERADE":
			return outcome(target[0]), nil
		case "MARK":
			if err := applyMark(pkt, target[1:]); err != nil {
				return "", err
			}
		default:
			out, err := e.chain(table, target[0], pkt)
			if err != nil || out != "" {
				return out, err
			}
		}
	}
	return "", nil
}

// match evaluates a rule's matches and returns its target words.
func (e *ruleEval) match(words []string, pkt *packet) (bool, []string, error) {
	ok := true
	neg := false
	for i := 0; i < len(words); i++ {
		w := words[i]
		var m bool
		switch w {
		case "!":
			neg = true
			continue
		case "-j":
			return ok, words[i+1:], nil
		case "-m":
			i++
			switch words[i] {
			case "comment", "physdev", "addrtype", "set", "mark", "conntrack":
				continue // the module's options follow
			}
			return false, nil, fmt.Errorf("unknown match module %s", words[i])
		case "--comment":
			i++
			continue
		case "--physdev-is-in":
			m = false // the tracer has no bridges
		case "--src-type", "--dst-type":
			i++
			addr := pkt.src
			if w == "--dst-type" {
				addr = pkt.dst
			}
			m = words[i] == "LOCAL" && slices.Contains(e.local, addr)
		case "-s":
			i++
			m = netip.MustParsePrefix(words[i]).Contains(pkt.src)
		case "-i":
			i++
			m = pkt.inIface != "" && (pkt.inIface == words[i] ||
				strings.HasSuffix(words[i], "+") && strings.HasPrefix(pkt.inIface, strings.TrimSuffix(words[i], "+")))
		case "-p":
			i++
			m = strings.EqualFold(words[i], string(pkt.proto))
		case "--mark":
			i++
			val, mask, _ := strings.Cut(words[i], "/")
			v, _ := strconv.ParseUint(val, 0, 32)
			mk, _ := strconv.ParseUint(mask, 0, 32)
			m = pkt.mark&uint32(mk) == uint32(v)
		case "--ctstate":
			i++
			m = slices.Contains(strings.Split(words[i], ","), "NEW")
		case "--match-set":
			var err error
			m, err = e.inSet(words[i+1], words[i+2], pkt)
			if err != nil {
				return false, nil, err
			}
			i += 2
		default:
			return false, nil, fmt.Errorf("unknown rule word %q", w)
		}
		if m == neg {
			ok = false
		}
		neg = false
	}
	return false, nil, fmt.Errorf("rule without target")
}

// inSet looks pkt up in a set, building the member from the directions as
// the kernel's set match does.
func (e *ruleEval) inSet(name, dirs string, pkt *packet) (bool, error) {
	set, ok := e.sets.Set(name)
	if !ok {
		return false, fmt.Errorf("rule matches missing ipset %s", name)
	}
	addr := func(d string) netip.Addr {
		if d == "src" {
			return pkt.src
		}
		return pkt.dst
	}
	d := strings.Split(dirs, ",")
	proto := map[proxy.Protocol]uint8{proxy.TCP: kipset.TCP, proxy.UDP: kipset.UDP, proxy.SCTP: kipset.SCTP}[pkt.proto]
	switch set.Type {
	case kipset.BitmapPort:
		return e.sets.Has(name, kipset.Entry{Port: pkt.dport}), nil
	case kipset.HashIP:
		return e.sets.Has(name, kipset.Entry{IP: addr(d[0])}), nil
	case kipset.HashIPPort:
		return e.sets.Has(name, kipset.Entry{IP: addr(d[0]), Protocol: proto, Port: pkt.dport}), nil
	case kipset.HashIPPortIP:
		return e.sets.Has(name, kipset.Entry{IP: addr(d[0]), Protocol: proto, Port: pkt.dport, IP2: addr(d[2])}), nil
	case kipset.HashIPPortNet:
		entries, err := e.sets.ListEntries(name)
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(entries, func(en kipset.Entry) bool {
			return en.IP == addr(d[0]) && en.Protocol == proto && en.Port == pkt.dport && en.Net.Contains(addr(d[2]))
		}), nil
	}
	return false, fmt.Errorf("set %s has unknown type %s", name, set.Type)
}

func applyMark(pkt *packet, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("MARK %v", args)
	}
	v, err := strconv.ParseUint(args[1], 0, 32)
	if err != nil {
		return fmt.Errorf("MARK value %q: %w", args[1], err)
	}
	switch args[0] {
	case "--or-mark":
		pkt.mark |= uint32(v)
	case "--xor-mark":
		pkt.mark ^= uint32(v)
	default:
		return fmt.Errorf("MARK %v", args)
	}
	return nil
}
