package nftables

import (
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// layoutVersion numbers the table layout this version renders: the kinds,
// types and hooks of the objects it names, and what their elements mean.
// Raise it with any change of those, and say in README.md what changed.
// A table whose objects differ is adopted all the same (the read-back
// compares every object with render, replace.go); the number tells the
// operator, and a later version, which layout was there.
const layoutVersion = 2

// The marker is an empty regular chain named markerPrefix + the layout's
// number, written once the rest of a sync is in the table (phaseMarker),
// so it names the layout of the last sync that completed. A chain, not the
// table's comment: the kernel keeps a table's comment from its creation
// (an "add table" of another comment changes nothing), so upstream's
// tables could never carry one, and upstream's first sync over ours would
// keep ours. Its name holds a "/", as upstream's per-service chains'
// names do: upstream kube-proxy, rolled back to, flushes it as a stale
// service chain and deletes it at its next sync, so a marker is never
// left over a table upstream owns. An svcproxy before markers deletes it
// as a chain it does not render; a later one replaces it with its own.
const markerPrefix = "svcproxy/layout/"

// layoutMarker is this version's marker chain.
var layoutMarker = markerPrefix + strconv.Itoa(layoutVersion)

// isMarker reports whether chain is a layout marker, of any version.
func isMarker(chain string) bool { return strings.HasPrefix(chain, markerPrefix) }

// markerLayout is the layout a marker chain names.
func markerLayout(chain string) (int, bool) {
	rest, ok := strings.CutPrefix(chain, markerPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n > 0
}

// diffMarkers is the unit that puts this version's marker in and takes any
// other out, together: a table never names two layouts. names are the
// dirty marker chains.
func (s *store) diffMarkers(names []string) *unit {
	slices.Sort(names)
	u := &unit{phase: phaseMarker, sortBy: markerPrefix}
	var commits []func()
	for _, name := range names {
		e := s.chains[name]
		switch {
		case e.desired != nil && !e.present:
			d := e.desired
			u.ops = append(u.ops, func(tx *knftables.Transaction) { tx.Add(chainObject(d)) })
			commits = append(commits, func() { e.present, e.kernel, e.hook = true, nil, d.kernelHook() })
		case e.desired == nil && e.present:
			u.ops = append(u.ops, func(tx *knftables.Transaction) { tx.Delete(&knftables.Chain{Name: name}) })
			commits = append(commits, func() { delete(s.chains, name) })
		case e.desired == nil:
			delete(s.chains, name)
		}
	}
	if len(u.ops) == 0 {
		return nil
	}
	u.commit = func() {
		for _, c := range commits {
			c()
		}
	}
	return u
}

// layoutsFound are the layouts the markers read back name, in order.
func (s *store) layoutsFound() []int {
	var found []int
	for name, e := range s.chains {
		if n, ok := markerLayout(name); ok && e.present {
			found = append(found, n)
		}
	}
	slices.Sort(found)
	return found
}

// logLayout tells the operator, after a read-back, whose layout the table
// has when it is not this version's (layoutNote).
func logLayout(family proxy.IPFamily, s *store) {
	if msg, found := layoutNote(s); msg != "" {
		klog.InfoS(msg, "ipFamily", family, "table", TableName, "tableLayout", found, "layout", layoutVersion)
	}
}

// layoutNote says whose layout a table read back has, and which (0: no
// marker), when it is not this version's: an upgrade, a rollback from a
// newer svcproxy, or a table of upstream kube-proxy or of an svcproxy
// before markers. Whatever it is, the next sync replaces what differs.
func layoutNote(s *store) (string, int) {
	found := s.layoutsFound()
	switch {
	case !s.tablePresent || (len(found) == 1 && found[0] == layoutVersion):
		return "", 0
	case len(found) == 0:
		return "Adopting an nftables table without a layout marker (upstream kube-proxy's, or an svcproxy's before markers): objects of another kind or type are replaced", 0
	case found[len(found)-1] > layoutVersion:
		return "The nftables table was written by a newer svcproxy: adopting it with this version's layout; objects of another kind or type are replaced, and the newer version replaces them again when it runs", found[len(found)-1]
	}
	return "Upgrading the nftables table to this version's layout: objects of another kind or type are replaced", found[len(found)-1]
}

// logReplaced tells what the last sync replaced, if anything.
func logReplaced(family proxy.IPFamily, r *replacement) {
	if r == nil {
		return
	}
	klog.InfoS("Replaced nftables objects of another kind or type, with the rules that use them, in one transaction",
		"ipFamily", family, "table", TableName, "sets", r.sets, "chains", r.chains, "rewrittenChains", r.rules)
}
