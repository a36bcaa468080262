package nftables

import (
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// Rules render desired's routes (which dispatch each source class uses,
// and whether it is masqueraded); they decide nothing themselves. A path
// whose source classes all use one dispatch is that dispatch's chain, with
// rules that mark what is masqueraded (masqRules); otherwise an entry
// chain sends each class on its way (entryRules).

// pathRoutes are one path's routes by source class.
type pathRoutes = [len(desired.Sources)]desired.Route

func outsidePodNode(r pathRoutes) (outside, pod, node desired.Route) {
	return r[desired.FromOutside], r[desired.FromPod], r[desired.FromNode]
}

// uniform reports whether every source class of r uses one dispatch.
func uniform(r pathRoutes) bool {
	outside, pod, node := outsidePodNode(r)
	return pod.Set == outside.Set && node.Set == outside.Set
}

// masqRules are the rules that mark, in the dispatch chain of a uniform
// path, what its routes masquerade: everything, or everything but a pod's
// (the node's traffic is not a pod's either). Routes the rules cannot tell
// apart fail the sync rather than being rendered as something else.
func (c *config) masqRules(r pathRoutes) []string {
	outside, pod, node := outsidePodNode(r)
	switch {
	case !outside.Masquerade && !pod.Masquerade && !node.Masquerade:
		return nil
	case outside.Masquerade && pod.Masquerade && node.Masquerade:
		return c.markAll
	case outside.Masquerade && node.Masquerade && c.markNotPod != nil:
		return c.markNotPod
	}
	c.fail(fmt.Errorf("cannot render routes %+v: no rule tells their masquerade apart", r))
	return nil
}

// entryRules are the rules of the entry chain of a path whose source
// classes use different dispatches: a pod's and the node's traffic first
// (each masqueraded as its route says), then the rest, outside (the
// outside dispatch's verdict, or its rules). verdict gives the verdict of
// each of the other sets.
func (c *config) entryRules(r pathRoutes, verdict map[desired.Set]string, outside []string) []string {
	out, pod, node := outsidePodNode(r)
	var rules []string
	if pod != out {
		if c.podMatch == "" {
			c.fail(fmt.Errorf("cannot render routes %+v: pods have a route of their own but no detector", r))
		} else {
			if pod.Masquerade {
				rules = append(rules, c.podMatch+" jump "+chainMarkMasq)
			}
			rules = append(rules, c.podMatch+" "+c.verdictOf(verdict, pod.Set, r))
		}
	}
	if node != out {
		if node.Masquerade {
			rules = append(rules, "fib saddr type local jump "+chainMarkMasq)
		}
		rules = append(rules, "fib saddr type local "+c.verdictOf(verdict, node.Set, r))
	}
	if out.Masquerade {
		rules = append(rules, "jump "+chainMarkMasq)
	}
	return append(rules, outside...)
}

// verdictOf is the verdict of set, failing the sync when the renderer has
// none for it (an entry chain whose outside DNAT is inline can send other
// classes only to the cluster-wide chain).
func (c *config) verdictOf(verdict map[desired.Set]string, set desired.Set, r pathRoutes) string {
	v := verdict[set]
	if v == "" {
		c.fail(fmt.Errorf("cannot render routes %+v: no chain for the %s endpoints", r, set))
		return "drop"
	}
	return v
}

// setVerdicts calls verdict once for each dispatch r uses, cluster-wide
// first (the order elements and chains are added in), and returns them
// by set.
func setVerdicts(r pathRoutes, verdict func(desired.Set) string) map[desired.Set]string {
	out := make(map[desired.Set]string, 2)
	for _, set := range []desired.Set{desired.SetCluster, desired.SetExternal, desired.SetInternal} {
		if slices.ContainsFunc(r[:], func(x desired.Route) bool { return x.Set == set }) {
			out[set] = verdict(set)
		}
	}
	return out
}

// fail keeps the first rendering error; Sync reports it.
func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}
