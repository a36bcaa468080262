package proxy

import (
	"fmt"
	"strings"
)

// Balancing is how a new flow to a Service's external frontends (node
// ports, external and load-balancer IPs) picks one endpoint of its
// dispatch. It is a decision of desired (per service port, from the
// Service's annotation and the node's default); only a datapath that sees
// those packets itself renders it: ebpf mode's tc programs
// (pkg/pipeline/backends/ebpf/nodeport, experimental).
type Balancing uint8

// The balancing algorithms.
const (
	// BalanceDefault is no choice of the Service's own: the node's default
	// applies. The model holds it for a Service without the annotation;
	// desired never leaves it in a State it computes.
	BalanceDefault Balancing = iota
	// BalanceRandom lets the mode pick as it always has: at random per new
	// flow (iptables, nftables), or by its scheduler (IPVS). Two nodes may
	// pick differently for the same flow.
	BalanceRandom
	// BalanceMaglev picks by Maglev consistent hashing of the flow's
	// 5-tuple (pkg/pipeline/maglev): every node picks the same endpoint for
	// the same flow, and removing one endpoint moves few other flows.
	BalanceMaglev
)

// Balancings lists the algorithms a Service or the node may ask for.
var Balancings = []Balancing{BalanceRandom, BalanceMaglev}

// String names the algorithm as the annotation and the flag spell it; ""
// for BalanceDefault.
func (b Balancing) String() string {
	switch b {
	case BalanceRandom:
		return "random"
	case BalanceMaglev:
		return "maglev"
	}
	return ""
}

// ParseBalancing returns the algorithm s names as String spells it (in any
// case, spaces around ignored), or an error listing the valid names.
func ParseBalancing(s string) (Balancing, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for _, b := range Balancings {
		if name == b.String() {
			return b, nil
		}
	}
	return BalanceDefault, fmt.Errorf("unknown load-balancing algorithm %q, want one of %v", s, Balancings)
}
