package iptables

import (
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
)

// ruleKey is a rule's canonical form, the same whether the rule is spelled
// as render writes it or as iptables-save prints it back. The tools print
// what the kernel holds, not what they were given: the address, interface
// and protocol matches first and addresses with their prefix length, a
// module's options in an order of their own and with its defaults spelled
// out, a probability as the kernel rounded it. So: those matches go first,
// in a fixed order, addresses as masked prefixes; every module (-m) and
// the target (-j) keep their place, their options sorted, defaults left
// out, values as the kernel keeps them. It covers the rules of a service
// port (render_service.go); a rule it spells otherwise than the tools
// compares unequal, which is safe (the port is not held).
func ruleKey(rule string, v6 bool) string {
	words := kiptables.SplitRule(rule)
	if len(words) < 2 || words[0] != "-A" {
		return rule
	}
	var header [len(headerOpts)]string
	type group struct {
		head string
		opts []string
	}
	groups := []group{{head: "-A " + words[1]}}
	neg := ""
	for i := 2; i < len(words); i++ {
		word := words[i]
		if word == "!" {
			neg = "! "
			continue
		}
		value := ""
		if i+1 < len(words) && (word == "--comment" || !isOption(words[i+1])) {
			value, i = words[i+1], i+1
		}
		switch h := slices.Index(headerOpts[:], word); {
		case h >= 0:
			header[h] = neg + word + " " + headerValue(word, value)
		case word == "-m" || word == "-j" || word == "-g":
			groups = append(groups, group{head: word + " " + value})
		default:
			g := &groups[len(groups)-1]
			g.opts = append(g.opts, neg+strings.TrimSpace(word+" "+optionValue(word, value)))
		}
		neg = ""
	}
	var b strings.Builder
	b.WriteString(groups[0].head)
	for _, h := range header {
		if h != "" {
			b.WriteString(" " + h)
		}
	}
	for _, g := range groups[1:] {
		b.WriteString(" " + g.head)
		opts := slices.DeleteFunc(g.opts, func(o string) bool { return isDefault(g.head, o, v6) })
		if g.head == "-j REJECT" && len(opts) == 0 {
			opts = append(opts, "--reject-with "+rejectDefault(v6))
		}
		slices.Sort(opts)
		for _, o := range opts {
			b.WriteString(" " + o)
		}
	}
	return b.String()
}

// headerOpts are the matches iptables-save prints first, in its order.
var headerOpts = [5]string{"-s", "-d", "-i", "-o", "-p"}

// isOption reports whether a word starts an option rather than being a
// value (no value of a service port's rules starts with "-").
func isOption(word string) bool { return word == "!" || strings.HasPrefix(word, "-") }

// headerValue is an address as a masked prefix ("10.0.0.1" and
// "10.0.0.1/32" alike), anything else as it is.
func headerValue(opt, v string) string {
	if opt != "-s" && opt != "-d" {
		return v
	}
	if p, err := netip.ParsePrefix(v); err == nil {
		return p.Masked().String()
	}
	if a, err := netip.ParseAddr(v); err == nil {
		return netip.PrefixFrom(a, a.BitLen()).String()
	}
	return v
}

// optionValue is a probability as the kernel keeps it (a 31-bit fraction,
// which iptables-save prints with eleven decimals and render with ten),
// anything else as it is.
func optionValue(opt, v string) string {
	if opt != "--probability" {
		return v
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return v
	}
	return strconv.FormatInt(int64(math.Round(f*0x80000000)), 10)
}

// isDefault reports whether o is an option iptables-save spells out for a
// module when it was left out: the recent match's full mask and source.
func isDefault(head, o string, v6 bool) bool {
	if head != "-m recent" {
		return false
	}
	mask := "--mask 255.255.255.255"
	if v6 {
		mask = "--mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}
	return o == mask || o == "--rsource"
}

// rejectDefault is what REJECT answers with unless told.
func rejectDefault(v6 bool) string {
	if v6 {
		return "icmp6-port-unreachable"
	}
	return "icmp-port-unreachable"
}
