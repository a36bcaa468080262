package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The tables other layouts leave, as the layout tests build them.
//
// testdata/unmarked-*.dump were written by the last svcproxy before
// layout markers: its golden dumps (loadbalancersourceranges-*), and what
// its render made of the kernel scenario's Services
// (pkg/testing/netnstest/scenario, IPv4).

// readDump reads a dump from testdata.
func readDump(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	retypeServiceIPs = regexp.MustCompile(`^add map (\S+ \S+) service-ips \{ type (\S+) \. inet_proto \. inet_service : verdict ; \}$`)
	retypeNodePorts  = regexp.MustCompile(`^(add map \S+ \S+ service-nodeports \{ type )inet_proto \. (inet_service : verdict ; \})$`)
	retypeIPElem     = regexp.MustCompile(`^add element (\S+ \S+) service-ips \{ (.*) : (.*) \}$`)
	retypeNPElem     = regexp.MustCompile(`^(add element \S+ \S+ service-nodeports \{ )\S+ \. (.*)$`)
	retypeIPRule     = regexp.MustCompile(`^add rule (\S+ \S+) services (\S+) daddr \. meta l4proto \. th dport vmap @service-ips comment "\w+"$`)
	retypeNPRule     = regexp.MustCompile(`^add rule (\S+ \S+) services (.*)meta l4proto \. th dport (vmap @service-nodeports) comment "\w+"$`)
	retypeInput      = regexp.MustCompile(`^(add chain \S+ \S+ filter-input) \{ .* \}$`)
	tableLine        = regexp.MustCompile(`^add table (\S+ \S+) `)
)

// retypedLayout rewrites a dump of the layout before markers into one that
// has three of its names with another kind or type, as a layout change
// between two versions would leave them, and the same flows:
//
//   - service-ips is a set of frontends (a verdict map in the dump), their
//     verdicts are in the map service-verdicts, and services goes to the
//     chain service-dispatch, which reads it;
//   - service-nodeports is keyed by the port alone (protocol . port in the
//     dump: the node ports of a dump must differ across protocols);
//   - filter-input is a regular chain (a base chain in the dump).
//
// Rules carry the comment render would give their text, markers go.
func retypedLayout(t *testing.T, dump string) string {
	t.Helper()
	var out []string
	rule := func(tableRef, chain, text string) string {
		return fmt.Sprintf("add rule %s %s %s comment %q", tableRef, chain, text, ruleID(text))
	}
	seen := map[*regexp.Regexp]bool{}
	for _, line := range strings.Split(strings.TrimSpace(dump), "\n") {
		var m []string
		match := func(re *regexp.Regexp) bool {
			m = re.FindStringSubmatch(line)
			seen[re] = seen[re] || m != nil
			return m != nil
		}
		switch {
		case strings.Contains(line, markerPrefix):
		case match(tableLine):
			out = append(out, line, fmt.Sprintf("add chain %s service-dispatch", m[1]))
		case match(retypeServiceIPs):
			out = append(out, fmt.Sprintf("add set %s service-ips { type %s . inet_proto . inet_service ; }", m[1], m[2]),
				fmt.Sprintf("add map %s service-verdicts { type %s . inet_proto . inet_service : verdict ; }", m[1], m[2]))
		case match(retypeNodePorts), match(retypeNPElem):
			out = append(out, m[1]+m[2])
		case match(retypeIPElem):
			out = append(out, fmt.Sprintf("add element %s service-ips { %s }", m[1], m[2]),
				fmt.Sprintf("add element %s service-verdicts { %s : %s }", m[1], m[2], m[3]))
		case match(retypeIPRule):
			frontend := m[2] + " daddr . meta l4proto . th dport "
			out = append(out, rule(m[1], chainServices, frontend+"@service-ips goto service-dispatch"),
				rule(m[1], "service-dispatch", frontend+"vmap @service-verdicts"))
		case match(retypeNPRule):
			out = append(out, rule(m[1], chainServices, m[2]+"th dport "+m[3]))
		case match(retypeInput):
			out = append(out, m[1])
		default:
			out = append(out, line)
		}
	}
	for _, re := range []*regexp.Regexp{retypeServiceIPs, retypeNodePorts, retypeIPRule, retypeNPRule, retypeInput} {
		if !seen[re] {
			t.Fatalf("retypedLayout: nothing matched %s", re)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// partFromDump is what a version whose render wrote dump claims: its
// chains with their rules, its sets and maps, and their elements, as one
// part, to sync with this version's engine (syncPart): another layout
// rolled back to, by a version that adopts a newer table as this one does.
func partFromDump(t *testing.T, family knftables.Family, dump string) *part {
	t.Helper()
	fake := knftables.NewFake(family, TableName)
	if err := fake.ParseDump(dump); err != nil {
		t.Fatal(err)
	}
	specs := map[string]*setSpec{}
	for name, s := range fake.Table.Sets {
		specs[name] = setSpecOf(name, false, s.Type, s.TypeOf, s.Flags, s.Timeout, s.Size)
	}
	for name, m := range fake.Table.Maps {
		specs[name] = setSpecOf(name, true, m.Type, m.TypeOf, m.Flags, m.Timeout, m.Size)
	}
	p := &part{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for name := range fake.Table.Chains {
			if !yield(name) {
				return
			}
		}
	}) {
		c := fake.Table.Chains[name]
		spec := &chainSpec{name: name}
		if c.Hook != nil {
			spec.base = base(*c.Type, *c.Hook, *c.Priority)
		}
		for _, r := range c.Rules {
			spec.rules = append(spec.rules, r.Rule)
			if m := numgenMapRef.FindStringSubmatch(r.Rule); m != nil {
				spec.epMap = specs[m[1]]
				spec.epMap.bound = true
			}
		}
		p.addChain(spec)
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for name := range specs {
			if !yield(name) {
				return
			}
		}
	}) {
		if !specs[name].bound {
			p.addSet(specs[name])
		}
		addDumpElements(p, fake.Table, name)
	}
	return p
}

func setSpecOf(name string, isMap bool, typ, typeOf string, flags []knftables.SetFlag, timeout *time.Duration, size *uint64) *setSpec {
	s := &setSpec{name: name, isMap: isMap, typ: typ, typeOf: typeOf, flags: flags}
	if timeout != nil {
		s.timeout = *timeout
	}
	if size != nil {
		s.size = *size
	}
	return s
}

// dataKeyOf is the store key of an element of set spelled key, decl
// the layout of the set that holds it: its data when set's keys are data
// and decl is of one of set's layouts (addresses, protocol names and
// ports, joined with " . "; an allow set's last field a prefix), else
// key (another layout's set, replaced whole).
func dataKeyOf(set string, decl *knft.Layout, key string) string {
	if _, ok := dataLayouts[set]; !ok || decl == nil {
		return key
	}
	fields := key
	var src netip.Prefix
	if strings.HasPrefix(set, setFirewallAllow) {
		i := strings.LastIndex(key, elemSep)
		if i < 0 {
			return key
		}
		var err error
		if src, err = prefixOf(key[i+len(elemSep):]); err != nil {
			return key
		}
		fields = key[:i]
	}
	b := fieldsData(fields)
	if src.IsValid() {
		b = appendAllowKey(nil, string(b), src)
	}
	if keyLayout(set, string(b)) == nil || decl.KeyLen() != len(b) {
		return key
	}
	return string(b)
}

// fieldsData is the data of fields spelled as nft spells them:
// addresses, protocol names and ports, joined with " . ", each padded to
// 4 bytes.
func fieldsData(fields string) []byte {
	var b []byte
	for f := range strings.SplitSeq(fields, elemSep) {
		if a, err := netip.ParseAddr(f); err == nil {
			b = appendAddrData(b, a)
		} else if p, err := strconv.ParseUint(f, 10, 16); err == nil {
			b = append(b, byte(p>>8), byte(p), 0, 0)
		} else {
			b = append(b, protoNumber(proxy.Protocol(strings.ToUpper(f))), 0, 0, 0)
		}
	}
	return b
}

// slotElemOf is the frontend's data, the slot and the value's data of an
// endpoint map's element spelled key : value, when typeOf declares an
// endpoint map (epLayouts).
func slotElemOf(typeOf, key, value string) (frontend string, slot int, data string, ok bool) {
	if epLayouts[typeOf] == nil {
		return "", 0, "", false
	}
	i := strings.LastIndex(key, elemSep)
	if i < 0 {
		return "", 0, "", false
	}
	slot, err := strconv.Atoi(key[i+len(elemSep):])
	if err != nil {
		return "", 0, "", false
	}
	return string(fieldsData(key[:i])), slot, string(fieldsData(value)), true
}

// prefixOf parses a prefix as nft spells it: a plain address is a
// full-length prefix.
func prefixOf(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.ParsePrefix(s)
}

// addDumpElements adds the elements of set as render claims them: those
// of a set whose keys are data by their data, an endpoint map's as one slot group per
// frontend.
func addDumpElements(p *part, table *knftables.FakeTable, set string) {
	var elems []*knftables.Element
	var decl *knft.Layout
	var typeOf string
	if s := table.Sets[set]; s != nil {
		elems, decl = s.Elements, knft.DeclaredLayout(s.Type, s.TypeOf, s.Flags, false)
	} else {
		m := table.Maps[set]
		elems, decl, typeOf = m.Elements, knft.DeclaredLayout(m.Type, m.TypeOf, m.Flags, true), m.TypeOf
	}
	groups := map[string][]string{}
	var frontends []string
	for _, el := range elems {
		key, value := strings.Join(el.Key, elemSep), strings.Join(el.Value, elemSep)
		if n, ok := endpointMapSlots(set); ok {
			if f, slot, v, ok := slotElemOf(typeOf, key, value); ok && slot < n {
				if groups[f] == nil {
					frontends = append(frontends, f)
					groups[f] = make([]string, n)
				}
				groups[f][slot] = v
				continue
			}
		}
		p.addElem(set, dataKeyOf(set, decl, key), value)
	}
	for _, f := range frontends {
		vals := groups[f]
		for len(vals) > 0 && vals[len(vals)-1] == "" {
			vals = vals[:len(vals)-1]
		}
		p.elems = append(p.elems, elemSpec{set: set, key: f, value: joinSlots(vals), slots: true})
	}
}

// syncPart syncs pt, in place of render's parts, over the table p reads
// back: what a version that renders pt would do.
func syncPart(t *testing.T, p *Proxier, pt *part) knft.Stats {
	t.Helper()
	ctx := context.Background()
	if !p.syncs.Read() {
		if err := p.ReadBack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p.store.clearDirty()
	p.store.resetClaims()
	p.store.replace(owner{}, pt)
	stats, err := apply(ctx, p.kernel, p.store.diff(), p.maxOps)
	if err != nil {
		t.Fatalf("syncing another layout's render: %v", err)
	}
	p.store.clearDirty()
	return stats
}
