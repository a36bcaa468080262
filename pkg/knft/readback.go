package knft

import (
	"context"
	"fmt"

	"sigs.k8s.io/knftables"
)

// readBackKnftables reports the table to sink through knftables' listings.
// Against the real nft each call is a `nft --json list table` of
// everything, which made a restart at 10k×10 take 67 s (README.md); it
// serves the Fake (knftables.Fake lists from memory) and the measured
// alternative (NewKnftables).
// decl, when not nil, tells what knftables' listings do not say: a
// chain's hook, a set's type, a rule's references.
func readBackKnftables(ctx context.Context, nft knftables.Interface, decl declarations, sink Sink) error {
	chains, err := nft.List(ctx, "chains")
	if knftables.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing chains: %w", err)
	}
	sink.Table()
	for _, name := range chains {
		var hook *ChainHook
		if decl != nil {
			hook = decl.hook(name)
		}
		sink.Chain(name, hook)
	}
	rules, err := nft.ListRules(ctx, "")
	if err != nil {
		return fmt.Errorf("listing rules: %w", err)
	}
	for _, r := range rules {
		comment := ""
		if r.Comment != nil {
			comment = *r.Comment
		}
		var refs []string
		if decl != nil {
			refs = RuleRefs(r.Rule)
		}
		sink.Rule(r.Chain, comment, refs)
	}
	for _, kind := range []string{"set", "map"} {
		names, err := nft.List(ctx, kind+"s")
		if err != nil {
			return fmt.Errorf("listing %ss: %w", kind, err)
		}
		for _, name := range names {
			info := SetInfo{Name: name, IsMap: kind == "map"}
			if decl != nil {
				info.Type = decl.setType(name)
			}
			if list, as := sink.Set(info); list {
				if err := readElementsKnftables(ctx, nft, kind == "map", name, as.layout(), sink); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// declarations tells what knftables' listings leave out.
type declarations interface {
	// hook is where chain is attached (the zero ChainHook: a regular
	// chain), or nil.
	hook(chain string) *ChainHook
	// setType is the type of set, or nil.
	setType(set string) *SetType
}

// listElements lists one set's elements through knftables and reports
// each to f, spelled (key, then value: fields joined with ElemSep), in a
// buffer reused after f returns.
func listElements(ctx context.Context, nft knftables.Interface, isMap bool, name string, f func(key, value []byte)) error {
	kind := "set"
	if isMap {
		kind = "map"
	}
	elems, err := nft.ListElements(ctx, kind, name)
	if err != nil {
		return fmt.Errorf("listing elements of %s %s: %w", kind, name, err)
	}
	var buf []byte
	for _, el := range elems {
		buf = appendJoined(buf[:0], el.Key)
		keyEnd := len(buf)
		buf = appendJoined(buf, el.Value)
		f(buf[:keyEnd], buf[keyEnd:])
	}
	return nil
}

// readSpelled reports one set's elements to sink, spelled, through
// knftables (the Kernel's way for a set its decoder cannot read).
func readSpelled(ctx context.Context, nft knftables.Interface, isMap bool, name string, sink Sink) error {
	err := listElements(ctx, nft, isMap, name, func(key, value []byte) { sink.Element(name, key, value) })
	if err != nil {
		return err
	}
	sink.SetListed(name)
	return nil
}

// appendJoined appends fields joined with ElemSep.
func appendJoined(b []byte, fields []string) []byte {
	for i, f := range fields {
		if i > 0 {
			b = append(b, ElemSep...)
		}
		b = append(b, f...)
	}
	return b
}
