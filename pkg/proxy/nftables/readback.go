package nftables

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/knftables"
)

// readBack fills the kernel side of the store from the existing table, once,
// when a new process starts: an unchanged table then diffs to nothing and
// nothing is flushed or rewritten, and whatever differs (an element deleted
// behind our back) is repaired piecemeal. Affinity sets are filled by the
// kernel and their elements are not ours to diff, so they are not listed.
//
// family is the table's nfgen family when the table is the real kernel's:
// then everything is read over netlink (nltable.go); otherwise (fakes)
// through knftables, which costs a whole-table JSON listing per call. On
// failure the kernel side is forgotten, so a retry starts clean.
func (s *store) readBack(ctx context.Context, nft knftables.Interface, family uint8) error {
	var err error
	if family != 0 {
		err = s.readBackNetlink(ctx, nft, family)
	} else {
		err = s.readBackKnftables(ctx, nft)
	}
	if err != nil {
		s.tablePresent = false
		s.chains, s.sets, s.elems = map[string]*chainEntry{}, map[string]*setEntry{}, map[string]map[string]*elemEntry{}
	}
	return err
}

func (s *store) readBackKnftables(ctx context.Context, nft knftables.Interface) error {
	chains, err := nft.List(ctx, "chains")
	if knftables.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing chains: %w", err)
	}
	s.tablePresent = true
	for _, name := range chains {
		s.chains[name] = &chainEntry{present: true}
	}
	rules, err := nft.ListRules(ctx, "")
	if err != nil {
		return fmt.Errorf("listing rules: %w", err)
	}
	for _, r := range rules {
		e := s.chains[r.Chain]
		if e == nil {
			e = &chainEntry{present: true}
			s.chains[r.Chain] = e
		}
		id := ""
		if r.Comment != nil {
			id = *r.Comment
		}
		e.kernel = append(e.kernel, id)
	}
	for _, kind := range []string{"set", "map"} {
		names, err := nft.List(ctx, kind+"s")
		if err != nil {
			return fmt.Errorf("listing %ss: %w", kind, err)
		}
		for _, name := range names {
			s.sets[name] = &setEntry{present: true, isMap: kind == "map"}
			if strings.HasPrefix(name, affinityPrefix) {
				continue
			}
			if err := s.readBackElements(ctx, nft, kind == "map", name); err != nil {
				return err
			}
		}
	}
	return nil
}

// readBackElements lists one set's elements through knftables.
func (s *store) readBackElements(ctx context.Context, nft knftables.Interface, isMap bool, name string) error {
	kind := "set"
	if isMap {
		kind = "map"
	}
	elems, err := nft.ListElements(ctx, kind, name)
	if err != nil {
		return fmt.Errorf("listing elements of %s %s: %w", kind, name, err)
	}
	for _, el := range elems {
		e := s.elem(name, joinElem(el.Key), true)
		e.present, e.kernel = true, joinElem(el.Value)
	}
	return nil
}
