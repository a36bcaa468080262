package knft

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/knftables"
)

// typedObjects are sets and maps of every declaration shape the nftables
// backend writes, the same names' other shapes in another table (as an
// older layout may have left them), and rules that use them.
var typedObjects = []knftables.Object{
	&knftables.Chain{Name: "c"},
	&knftables.Map{Name: "verdicts", Type: "ipv4_addr . inet_proto . inet_service : verdict"},
	&knftables.Map{Name: "ports", Type: "inet_proto . inet_service : verdict"},
	&knftables.Set{Name: "addrs", Type: "ipv4_addr"},
	&knftables.Set{Name: "allow", Type: "ipv4_addr . inet_proto . inet_service . ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}},
	&knftables.Set{Name: "affinity", Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: knftables.PtrTo(10800 * time.Second)},
	&knftables.Set{Name: "affinity-short", Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: knftables.PtrTo(42 * time.Second)},
	&knftables.Map{Name: "eps", TypeOf: "ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport"},
	&knftables.Map{Name: "eps6", TypeOf: "ip6 daddr . meta l4proto . th dport . numgen random mod 1 : ip6 daddr . th dport"},
	&knftables.Map{Name: "ports-only", Type: "inet_service : verdict"},
	&knftables.Set{Name: "frontends", Type: "ipv4_addr . inet_proto . inet_service"},
	&knftables.Chain{Name: "r"},
	&knftables.Rule{Chain: "r", Rule: "ip daddr . meta l4proto . th dport vmap @verdicts"},
	&knftables.Rule{Chain: "r", Rule: "ip daddr @addrs meta l4proto . th dport vmap @ports"},
	&knftables.Rule{Chain: "r", Rule: "ip daddr . meta l4proto . th dport . ip saddr != @allow drop"},
	&knftables.Rule{Chain: "r", Rule: "ip saddr @affinity goto c"},
	&knftables.Rule{Chain: "r", Rule: "update @affinity { ip saddr } jump c"},
	&knftables.Rule{Chain: "r", Rule: "meta l4proto tcp dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @eps"},
	&knftables.Rule{Chain: "r", Rule: "th dport vmap @ports-only"},
	&knftables.Rule{Chain: "r", Rule: "ip daddr . meta l4proto . th dport @frontends ip daddr { 10.0.0.1, 10.0.0.2 } jump c"},
	&knftables.Rule{Chain: "r", Rule: "meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.0.0.1 . 80, 1 : 10.0.0.2 . 80 }"},
}

// The kernel's read-back reports each set's type as DeclaredType computes
// it from the declaration, and each rule's references as RuleRefs reads
// them from its text; the fake reports the same from its declarations.
func TestReadBackReportsSetTypesAndRefs(t *testing.T) {
	inTable(t, "knfttypes", func(ctx context.Context, k *Kernel) error {
		u := &Unit{Objects: func(tx *knftables.Transaction) {
			for _, o := range typedObjects {
				tx.Add(o)
			}
		}}
		if _, err := k.Apply(ctx, [][]*Unit{{u}}); err != nil {
			return err
		}
		kernel := newRecordSink(t)
		if err := k.ReadBack(ctx, kernel); err != nil {
			return err
		}
		fake := knftables.NewFake(knftables.IPv4Family, testTable)
		ftx := fake.NewTransaction()
		ftx.Add(&knftables.Table{})
		for _, o := range typedObjects {
			ftx.Add(o)
		}
		if err := fake.Run(ctx, ftx); err != nil {
			return err
		}
		fromFake := newRecordSink(t)
		if err := NewFake(fake, nil).ReadBack(ctx, fromFake); err != nil {
			return err
		}
		return compareTypesAndRefs(kernel, fromFake)
	})
}

func compareTypesAndRefs(kernel, fake *recordSink) error {
	for _, o := range typedObjects {
		var name, typ, typeOf string
		var flags []knftables.SetFlag
		var timeout *time.Duration
		isMap := false
		switch o := o.(type) {
		case *knftables.Set:
			name, typ, typeOf, flags, timeout = o.Name, o.Type, o.TypeOf, o.Flags, o.Timeout
		case *knftables.Map:
			name, typ, typeOf, flags, timeout, isMap = o.Name, o.Type, o.TypeOf, o.Flags, o.Timeout, true
		default:
			continue
		}
		want, ok := DeclaredType(typ, typeOf, flags, isMap, timeout)
		if !ok {
			return fmt.Errorf("%s: DeclaredType does not know %q%q", name, typ, typeOf)
		}
		for who, got := range map[string]*SetType{"kernel": kernel.types[name], "fake": fake.types[name]} {
			if got == nil || *got != want {
				return fmt.Errorf("%s: the %s reports type %+v, declared %+v", name, who, got, want)
			}
		}
	}
	var rules []string
	for _, o := range typedObjects {
		if r, ok := o.(*knftables.Rule); ok {
			rules = append(rules, r.Rule)
		}
	}
	for i, r := range rules {
		want := RuleRefs(r)
		if i >= len(kernel.refs["r"]) || i >= len(fake.refs["r"]) {
			return fmt.Errorf("rule %d (%q) not reported", i, r)
		}
		if got := kernel.refs["r"][i]; !slices.Equal(got, want) {
			return fmt.Errorf("rule %q: the kernel reports references %q, its text %q", r, got, want)
		}
		if got := fake.refs["r"][i]; !slices.Equal(got, want) {
			return fmt.Errorf("rule %q: the fake reports references %q, its text %q", r, got, want)
		}
	}
	return nil
}

// RuleRefs reads the names a rule uses, once each, without what an
// anonymous set or map holds.
func TestRuleRefs(t *testing.T) {
	for rule, want := range map[string][]string{
		"ip daddr . meta l4proto . th dport vmap @service-ips":                              {"service-ips"},
		"ct status dnat ip saddr . ip daddr @hairpin-endpoints-s0 jump mark-for-masquerade": {"hairpin-endpoints-s0", "mark-for-masquerade"},
		"goto external-ABC-ns/svc/tcp/p":                                                    {"external-ABC-ns/svc/tcp/p"},
		"ip daddr @a ip saddr @a reject":                                                    {"a"},
		"ip daddr vmap { 10.0.0.1 : goto x, 10.0.0.2 : jump y }":                            nil,
		"counter name \"localhost-nodeport-rejected-tcp\" reject":                           nil,
		"masquerade fully-random":                                                           nil,
	} {
		if got := RuleRefs(rule); !slices.Equal(got, want) {
			t.Errorf("RuleRefs(%q) = %q, want %q", rule, got, want)
		}
	}
}
