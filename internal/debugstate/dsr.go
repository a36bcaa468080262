package debugstate

import (
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// DSR is desired.DSR: a port's direct server return. Absent from a port
// without one, and from an older daemon's dump.
type DSR struct {
	Tunnels []Tunnel `json:"tunnels"`
	In      Dispatch `json:"in"`
}

// Tunnel is desired.Tunnel: an endpoint on a peer node and that node's
// address.
type Tunnel struct {
	Endpoint netip.Addr `json:"endpoint"`
	Node     netip.Addr `json:"node"`
	NodeName string     `json:"nodeName,omitempty"`
}

func encodeDSR(d *desired.DSR) *DSR {
	if d == nil {
		return nil
	}
	out := &DSR{Tunnels: make([]Tunnel, 0, len(d.Tunnels)), In: encodeDispatch(d.In)}
	for _, t := range d.Tunnels {
		out.Tunnels = append(out.Tunnels, Tunnel{Endpoint: t.Endpoint, Node: t.Node, NodeName: t.NodeName})
	}
	return out
}

func (d *DSR) decode() (*desired.DSR, error) {
	if d == nil {
		return nil, nil
	}
	in, err := d.In.decode()
	if err != nil {
		return nil, fmt.Errorf("dsr: %w", err)
	}
	out := &desired.DSR{In: in}
	for _, t := range d.Tunnels {
		out.Tunnels = append(out.Tunnels, desired.Tunnel{Endpoint: t.Endpoint, Node: t.Node, NodeName: t.NodeName})
	}
	return out, nil
}

// decodeForwarding parses ServicePort.ExternalForwarding; absent (an older
// daemon's dump) is no decision, which reads as snat, the only forwarding
// that daemon had.
func decodeForwarding(s string) (proxy.Forwarding, error) {
	if s == "" {
		return proxy.ForwardDefault, nil
	}
	return proxy.ParseForwarding(s)
}
