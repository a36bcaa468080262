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
}

// CombineOutcomes merges the branches of one packet into its Result: the
// verdict they share ("MIXED(a,b)" when two differ), the distinct DNAT
// endpoints sorted, and masquerade when any DNAT branch masquerades.
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
		}
	}
	slices.SortFunc(res.Endpoints, netip.AddrPort.Compare)
	return res
}
