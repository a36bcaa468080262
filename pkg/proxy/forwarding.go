package proxy

import (
	"fmt"
	"strings"
)

// Forwarding is how external traffic (node ports, external and
// load-balancer IPs) of an externalTrafficPolicy: Cluster port reaches an
// endpoint on another node. It is a decision of desired (per service port,
// from the Service's annotation and the node's default); only ebpf mode's
// tc programs with --bpf-dsr render direct server return
// (pkg/pipeline/backends/ebpf/nodeport); every other datapath masquerades,
// as kube-proxy does.
type Forwarding uint8

// The forwarding methods.
const (
	// ForwardDefault is no choice of the Service's own: the node's default
	// applies. The model holds it for a Service without the annotation;
	// desired never leaves it in a State it computes.
	ForwardDefault Forwarding = iota
	// ForwardSNAT masquerades the flow to the receiving node's address, so
	// that the reply comes back through it: the endpoint sees the node, not
	// the client.
	ForwardSNAT
	// ForwardDSR tunnels the client's packet unchanged to the endpoint's
	// node, which delivers it with the client's address and answers the
	// client directly (direct server return).
	ForwardDSR
)

// Forwardings lists the methods a Service or the node may ask for.
var Forwardings = []Forwarding{ForwardSNAT, ForwardDSR}

// String names the method as the annotation and the flag spell it; "" for
// ForwardDefault.
func (f Forwarding) String() string {
	switch f {
	case ForwardSNAT:
		return "snat"
	case ForwardDSR:
		return "dsr"
	}
	return ""
}

// ParseForwarding returns the method s names as String spells it (in any
// case, spaces around ignored), or an error listing the valid names.
func ParseForwarding(s string) (Forwarding, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for _, f := range Forwardings {
		if name == f.String() {
			return f, nil
		}
	}
	return ForwardDefault, fmt.Errorf("unknown external forwarding %q, want one of %v", s, Forwardings)
}
