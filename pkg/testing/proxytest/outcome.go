package proxytest

import (
	"fmt"
	"net/netip"
	"slices"
)

// Outcome is where one branch of a traced packet ended: a packet forks
// into one branch per endpoint a rule may choose.
type Outcome struct {
	Verdict    Verdict
	Endpoint   netip.AddrPort // DNAT only
	Masquerade bool           // DNAT only
	// Tunneled: the packet is tunnelled to Endpoint's node unchanged
	// (direct server return; DNAT only).
	Tunneled bool
}

// CombineOutcomes merges the branches of one packet into its Result: the
// verdict they share ("MIXED(a,b)" when two differ), the distinct DNAT
// endpoints sorted, masquerade when any DNAT branch masquerades, and the
// endpoints of the branches that tunnel.
func CombineOutcomes(outs []Outcome) Result {
	var res Result
	for i, o := range outs {
		if i > 0 && o.Verdict != res.Verdict {
			return Result{Verdict: Verdict(fmt.Sprintf("MIXED(%s,%s)", res.Verdict, o.Verdict))}
		}
		res.Verdict = o.Verdict
		if o.Verdict == DNAT {
			if !slices.Contains(res.Endpoints, o.Endpoint) {
				res.Endpoints = append(res.Endpoints, o.Endpoint)
			}
			res.Masquerade = res.Masquerade || o.Masquerade
			if o.Tunneled && !slices.Contains(res.Tunneled, o.Endpoint) {
				res.Tunneled = append(res.Tunneled, o.Endpoint)
			}
		}
	}
	slices.SortFunc(res.Endpoints, netip.AddrPort.Compare)
	slices.SortFunc(res.Tunneled, netip.AddrPort.Compare)
	return res
}

// BranchEnd is how a rule tracer's branch ended: dropped or rejected by a
// rule, or let through as last rewritten (to Dst when DNATed, marked for
// masquerade or not).
type BranchEnd struct {
	Dropped, Rejected bool
	DNAT              bool
	Dst               netip.AddrPort // DNAT only
	Masquerade        bool           // DNAT only
}

// Outcome is the Outcome of a branch that ended as e.
func (e BranchEnd) Outcome() Outcome {
	switch {
	case e.Dropped:
		return Outcome{Verdict: Drop}
	case e.Rejected:
		return Outcome{Verdict: Reject}
	case e.DNAT:
		return Outcome{Verdict: DNAT, Endpoint: e.Dst, Masquerade: e.Masquerade}
	}
	return Outcome{Verdict: Accept}
}

// CombineBranches is the Result of a traced packet whose branches are bs,
// each ended as end says: the rule tracers of the iptables and nftables
// backends share it, so only their rule matching differs.
func CombineBranches[B any](bs []B, end func(B) BranchEnd) Result {
	outs := make([]Outcome, len(bs))
	for i, b := range bs {
		outs[i] = end(b).Outcome()
	}
	return CombineOutcomes(outs)
}
