package explain

import (
	"fmt"
	"io"
	"strings"
)

// Write prints e, and the kernel objects when given, for a human.
func (e Explanation) Write(w io.Writer, mode string, objects []string) error {
	var b strings.Builder
	p := e.Packet
	fmt.Fprintf(&b, "packet:     %s:%d/%s", p.Dest, p.Port, p.Protocol)
	if p.Source.IsValid() {
		fmt.Fprintf(&b, " from %s", p.Source)
	}
	fmt.Fprintf(&b, " (%s source, %s)\n", e.Source, e.Family)
	if e.Port != nil {
		fmt.Fprintf(&b, "service:    %s port %d/%s (cluster IP %s)\n", e.Port.Name, e.Port.Port, e.Port.Protocol, e.Port.ClusterIP)
		fmt.Fprintf(&b, "frontend:   %s\n", e.Frontend)
		if e.Policy != "" {
			fmt.Fprintf(&b, "policy:     %s (%s endpoints)\n", e.Policy, e.Class)
		}
	}
	if e.Quarantine != nil {
		b.WriteString(e.Quarantine.line() + "\n")
	}
	fmt.Fprintf(&b, "verdict:    %s\n", e.Verdict)
	if e.Verdict == DNAT {
		fmt.Fprintf(&b, "endpoints:  %s\n", joinAddrPorts(e.Endpoints))
		fmt.Fprintf(&b, "masquerade: %t\n", e.Masquerade)
		if e.Affinity > 0 {
			fmt.Fprintf(&b, "affinity:   ClientIP, %d s\n", e.Affinity)
		}
		if e.Balancing != "" {
			fmt.Fprintf(&b, "balancing:  %s (external traffic)\n", e.Balancing)
		}
		if e.Forwarding != "" {
			fmt.Fprintf(&b, "forwarding: %s (external traffic to other nodes)\n", e.Forwarding)
		}
		for _, t := range e.Tunneled {
			fmt.Fprintf(&b, "tunnel:     %s via node %s (%s), client kept\n", t.Endpoint, t.Node, t.NodeIP)
		}
	}
	b.WriteString("why:\n")
	for _, r := range e.Reasons {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	if len(objects) > 0 {
		fmt.Fprintf(&b, "kernel objects (%s mode):\n", mode)
		for _, o := range objects {
			fmt.Fprintf(&b, "  %s\n", o)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
