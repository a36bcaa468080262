package nftables

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/knftables"
)

// readBack fills the kernel side of the store from the existing table, once,
// when a new process starts: an unchanged table then diffs to nothing and
// nothing is flushed or rewritten. Affinity sets are filled by the kernel
// and their elements are not ours to diff, so they are not listed.
func (s *store) readBack(ctx context.Context, nft knftables.Interface) error {
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
		if err := s.readBackSets(ctx, nft, kind); err != nil {
			return err
		}
	}
	return nil
}

func (s *store) readBackSets(ctx context.Context, nft knftables.Interface, kind string) error {
	names, err := nft.List(ctx, kind+"s")
	if err != nil {
		return fmt.Errorf("listing %ss: %w", kind, err)
	}
	for _, name := range names {
		s.sets[name] = &setEntry{present: true, isMap: kind == "map"}
		if strings.HasPrefix(name, affinityPrefix) {
			continue
		}
		elems, err := nft.ListElements(ctx, kind, name)
		if err != nil {
			return fmt.Errorf("listing elements of %s %s: %w", kind, name, err)
		}
		for _, el := range elems {
			e := s.elem(name, joinElem(el.Key), true)
			e.present, e.kernel = true, joinElem(el.Value)
		}
	}
	return nil
}
