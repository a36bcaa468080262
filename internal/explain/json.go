package explain

import (
	"encoding/json"
	"io"
	"strings"
)

// Report is the machine-readable Explanation (`svcproxy explain --json`).
// Fields are stable; empty ones are left out.
type Report struct {
	Packet PacketReport `json:"packet"`
	Family string       `json:"family"`
	// Verdict is one word: DNAT, REJECT, DROP or ACCEPT.
	Verdict string `json:"verdict"`
	// Service is namespace/name:port of the matched Service port.
	Service     string `json:"service,omitempty"`
	ServicePort uint16 `json:"servicePort,omitempty"`
	ClusterIP   string `json:"clusterIP,omitempty"`
	Frontend    string `json:"frontend,omitempty"`
	// Source is how the dataplane sees the client: pod, host or external.
	Source string `json:"source"`
	Class  string `json:"class,omitempty"`
	Policy string `json:"policy,omitempty"`
	// Endpoints are IP:port, in the programmed order (DNAT only).
	Endpoints  []string `json:"endpoints,omitempty"`
	Masquerade bool     `json:"masquerade"`
	Affinity   int32    `json:"affinitySeconds,omitempty"`
	// Balancing is "random" or "maglev" for a packet DNATed through an
	// external frontend (decided; only ebpf mode's experimental tc programs route by maglev).
	Balancing string `json:"balancing,omitempty"`
	// Forwarding is "snat" or "dsr" for a packet DNATed through an external
	// frontend; Tunneled the endpoints it reaches by direct server return.
	Forwarding string         `json:"forwarding,omitempty"`
	Tunneled   []TunnelReport `json:"tunneled,omitempty"`
	Reasons    []string       `json:"reasons"`
	Mode       string         `json:"mode,omitempty"`
	Objects    []string       `json:"objects,omitempty"`
	// Quarantine is set when the packet's Service port is quarantined.
	Quarantine *Quarantine `json:"quarantine,omitempty"`
}

// TunnelReport is an endpoint reached by tunnel and the node it goes to.
type TunnelReport struct {
	Endpoint string `json:"endpoint"`
	Node     string `json:"node"`
	NodeIP   string `json:"nodeIP"`
}

// PacketReport is the packet as explained.
type PacketReport struct {
	Dest     string `json:"dest"`
	Port     uint16 `json:"port"`
	Protocol string `json:"protocol"`
	Source   string `json:"source,omitempty"`
}

// Word is the verdict as one word (ACCEPT, DNAT, REJECT, DROP).
func (v Verdict) Word() string {
	w, _, _ := strings.Cut(string(v), " ")
	return w
}

// Report returns e (and the kernel objects of mode, when given) as a Report.
func (e Explanation) Report(mode string, objects []string) Report {
	p := e.Packet
	r := Report{
		Packet:  PacketReport{Dest: p.Dest.String(), Port: p.Port, Protocol: string(p.Protocol)},
		Family:  string(e.Family),
		Verdict: e.Verdict.Word(), Frontend: e.Frontend, Source: e.Source,
		Class: e.Class, Policy: e.Policy, Masquerade: e.Masquerade, Affinity: e.Affinity, Balancing: e.Balancing,
		Forwarding: e.Forwarding,
		Reasons:    append([]string{}, e.Reasons...), Mode: mode, Objects: objects, Quarantine: e.Quarantine,
	}
	if p.Source.IsValid() {
		r.Packet.Source = p.Source.String()
	}
	if e.Port != nil {
		r.Service, r.ServicePort = e.Port.Name.String(), e.Port.Port
		if e.Port.ClusterIP.IsValid() {
			r.ClusterIP = e.Port.ClusterIP.String()
		}
	}
	for _, ep := range e.Endpoints {
		r.Endpoints = append(r.Endpoints, ep.String())
	}
	for _, t := range e.Tunneled {
		r.Tunneled = append(r.Tunneled, TunnelReport{Endpoint: t.Endpoint.String(), Node: t.Node, NodeIP: t.NodeIP.String()})
	}
	return r
}

// WriteJSON prints e as an indented JSON Report.
func (e Explanation) WriteJSON(w io.Writer, mode string, objects []string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(e.Report(mode, objects))
}
