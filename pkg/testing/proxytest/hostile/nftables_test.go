package hostile

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

func newNFT(family proxy.IPFamily) backend {
	nftFamily := knftables.IPv4Family
	if family == proxy.IPv6 {
		nftFamily = knftables.IPv6Family
	}
	fake := knftables.NewFake(nftFamily, nftables.TableName)
	p := nftables.NewWithInterface(family, knft.NewFake(fake, nil))
	return backend{
		name:  "nftables",
		sync:  func(st *desired.State) error { return p.Sync(ctx, st, proxytest.ModeOf(st)) },
		check: func(t reporter, st *desired.State) { t.Helper(); checkNFT(t, st.Family, fake) },
	}
}

// nftName is what nft's scanner accepts as an unquoted chain or set name;
// the kernel stores names of at most 255 bytes.
var nftName = regexp.MustCompile(`^[A-Za-z_.][A-Za-z0-9/\\_.-]*$`)

// checkNFT checks every object of the fake's table: names nft can parse,
// rules without injected lines or zones, and every element of every set
// and map against the set's declared type; interval sets must not hold
// overlapping elements (the kernel refuses them, "File exists").
func checkNFT(t reporter, family proxy.IPFamily, fake *knftables.Fake) {
	t.Helper()
	table := fake.Table
	if table == nil {
		t.Errorf("nftables %s: no table after a successful sync", family)
		return
	}
	for name, ch := range table.Chains {
		checkName(t, family, "chain", name)
		for _, r := range ch.Rules {
			if strings.ContainsAny(r.Rule, "\n\r%") {
				t.Errorf("nftables %s: chain %s: rule %q has a newline or %%", family, name, r.Rule)
			}
		}
	}
	for name, s := range table.Sets {
		checkName(t, family, "set", name)
		checkElements(t, family, table, name, s.Type, s.TypeOf, s.Flags, s.Elements)
	}
	for name, m := range table.Maps {
		checkName(t, family, "map", name)
		checkElements(t, family, table, name, m.Type, m.TypeOf, m.Flags, m.Elements)
	}
}

func checkName(t reporter, family proxy.IPFamily, kind, name string) {
	t.Helper()
	if !nftName.MatchString(name) || len(name) > 255 {
		t.Errorf("nftables %s: %s name %q is not one nft accepts", family, kind, name)
	}
}

// checkElements checks each element of one set or map (typ or typeOf as
// declared) field by field, then the interval set's overlaps.
func checkElements(t reporter, family proxy.IPFamily, table *knftables.FakeTable, name, typ, typeOf string,
	flags []knftables.SetFlag, elems []*knftables.Element,
) {
	t.Helper()
	keyTypes, valueTypes, err := fieldTypes(typ, typeOf)
	if err != nil {
		t.Errorf("nftables %s: %s: %v", family, name, err)
		return
	}
	interval := slices.Contains(flags, knftables.IntervalFlag)
	for _, e := range elems {
		key, value := strings.Join(e.Key, " . "), strings.Join(e.Value, " . ")
		if err := checkFields(family, table, keyTypes, key, interval); err != nil {
			t.Errorf("nftables %s: %s: element key %q: %v", family, name, key, err)
		}
		if err := checkFields(family, table, valueTypes, value, false); err != nil {
			t.Errorf("nftables %s: %s: element %q value %q: %v", family, name, key, value, err)
		}
	}
	if interval {
		checkOverlaps(t, family, name, keyTypes, elems)
	}
}

// fieldTypes returns the data types of a set's key and (for a map) value
// fields. A typeof declaration is translated through the expressions this
// backend uses.
func fieldTypes(typ, typeOf string) (key, value []string, err error) {
	decl := typ
	if decl == "" {
		decl = typeOf
	}
	k, v, _ := strings.Cut(decl, " : ")
	for _, part := range []struct {
		text string
		out  *[]string
	}{{k, &key}, {v, &value}} {
		if part.text == "" {
			continue
		}
		for _, f := range strings.Split(part.text, " . ") {
			dt, ok := f, typ != ""
			if !ok {
				dt, ok = typeofTypes[f]
				if !ok && strings.HasPrefix(f, "numgen random mod ") {
					dt, ok = "integer", true
				}
			}
			if !ok {
				return nil, nil, fmt.Errorf("unknown typeof expression %q in %q", f, decl)
			}
			*part.out = append(*part.out, dt)
		}
	}
	return key, value, nil
}

var typeofTypes = map[string]string{
	"ip daddr": "ipv4_addr", "ip saddr": "ipv4_addr", "ip6 daddr": "ipv6_addr", "ip6 saddr": "ipv6_addr",
	"meta l4proto": "inet_proto", "th dport": "inet_service",
}

// checkFields checks an element's key or value, " . "-joined, against types.
func checkFields(family proxy.IPFamily, table *knftables.FakeTable, types []string, text string, interval bool) error {
	if strings.ContainsAny(text, "\n\r%\"") {
		return fmt.Errorf("newline, %% or quote")
	}
	if len(types) == 0 {
		if text != "" {
			return fmt.Errorf("a value in a set")
		}
		return nil
	}
	fields := strings.Split(text, " . ")
	if len(fields) != len(types) {
		return fmt.Errorf("%d fields, type has %d", len(fields), len(types))
	}
	for i, f := range fields {
		if err := checkField(family, table, types[i], f, interval); err != nil {
			return fmt.Errorf("field %d (%s): %w", i, types[i], err)
		}
	}
	return nil
}

func checkField(family proxy.IPFamily, table *knftables.FakeTable, typ, f string, interval bool) error {
	switch typ {
	case "ipv4_addr", "ipv6_addr":
		want := proxy.IPv4
		if typ == "ipv6_addr" {
			want = proxy.IPv6
		}
		if want != family {
			return fmt.Errorf("a %s field in a %s table", typ, family)
		}
		p, err := parseField(f, interval)
		if err != nil {
			return err
		}
		if err := checkAddr(family, p.Addr()); err != nil {
			return err
		}
		if p != p.Masked() {
			return fmt.Errorf("prefix %s has host bits", p)
		}
	case "inet_proto":
		if !slices.Contains([]string{"tcp", "udp", "sctp"}, f) {
			return fmt.Errorf("protocol %q", f)
		}
	case "inet_service":
		if n, err := strconv.Atoi(f); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != f {
			return fmt.Errorf("port %q", f)
		}
	case "integer":
		if n, err := strconv.Atoi(f); err != nil || n < 0 || strconv.Itoa(n) != f {
			return fmt.Errorf("slot %q", f)
		}
	case "verdict":
		return checkVerdict(table, f)
	default:
		return fmt.Errorf("unknown type")
	}
	return nil
}

// parseField reads an address, or in an interval set also a prefix.
func parseField(f string, interval bool) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(f); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	if !interval {
		return netip.Prefix{}, fmt.Errorf("%q is not an address", f)
	}
	p, err := netip.ParsePrefix(f)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or prefix", f)
	}
	return p, nil
}

func checkVerdict(table *knftables.FakeTable, f string) error {
	switch verb, chain, _ := strings.Cut(f, " "); verb {
	case "drop", "accept", "return":
		if chain != "" {
			return fmt.Errorf("verdict %q", f)
		}
	case "goto", "jump":
		if table.Chains[chain] == nil {
			return fmt.Errorf("verdict %q: no such chain", f)
		}
	default:
		return fmt.Errorf("verdict %q", f)
	}
	return nil
}

// checkOverlaps fails when two elements of an interval set overlap: equal
// non-interval fields and overlapping address prefixes in every address field.
func checkOverlaps(t reporter, family proxy.IPFamily, name string, types []string, elems []*knftables.Element) {
	t.Helper()
	parsed := make([][]string, len(elems))
	for i, e := range elems {
		parsed[i] = strings.Split(strings.Join(e.Key, " . "), " . ")
	}
	for i := range parsed {
		for j := range i {
			if len(parsed[i]) == len(types) && len(parsed[j]) == len(types) && overlap(types, parsed[i], parsed[j]) {
				t.Errorf("nftables %s: interval set %s: elements %q and %q overlap", family, name,
					strings.Join(parsed[j], " . "), strings.Join(parsed[i], " . "))
			}
		}
	}
}

func overlap(types, a, b []string) bool {
	for k, typ := range types {
		if typ != "ipv4_addr" && typ != "ipv6_addr" {
			if a[k] != b[k] {
				return false
			}
			continue
		}
		pa, errA := parseField(a[k], true)
		pb, errB := parseField(b[k], true)
		if errA != nil || errB != nil || !pa.Overlaps(pb) {
			return false
		}
	}
	return true
}
