// Package debugstate keeps the last desired.State each syncer programmed
// and serves it as JSON (Path, on the local API's unix socket: see
// internal/localapi), for `svcproxy explain` and for humans. The wire types here are the only JSON
// form of a State: desired's types stay free of encoding concerns, and
// Encode/Decode round-trip a State exactly (except State.Changed, which is
// about one sync, not about what is programmed).
package debugstate

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Dump is the body of Path: the proxy mode, whose kernel objects explain
// names, and one entry per IP family that has synced at least once, IPv4
// first.
type Dump struct {
	Mode   string  `json:"mode"`
	States []State `json:"states"`
}

// State is the wire form of a desired.State.
type State struct {
	Family proxy.IPFamily `json:"family"`
	// SyncedAt is when the syncer finished programming this state.
	SyncedAt     time.Time      `json:"syncedAt"`
	NodeIPs      []netip.Addr   `json:"nodeIPs"`
	NodePorts    NodePorts      `json:"nodePorts"`
	Masquerade   Masquerade     `json:"masquerade"`
	ServiceCIDRs []netip.Prefix `json:"serviceCIDRs,omitempty"`
	// Peers are the nodes' addresses that decapsulate this node's DSR
	// tunnels (--bpf-dsr); absent without.
	Peers []netip.Addr `json:"peers,omitempty"`
	// ClusterSources are the sources inside the cluster, never tunnelled
	// by DSR.
	ClusterSources []netip.Prefix `json:"clusterSources,omitempty"`
	HealthChecks   []HealthCheck  `json:"healthChecks,omitempty"`
	// Services is the last field: the handler streams them after the
	// rest of the object (writeState).
	Services []ServicePort `json:"services"`
}

// NodePorts is desired.NodePortAddrs.
type NodePorts struct {
	All bool         `json:"all"`
	IPs []netip.Addr `json:"ips,omitempty"`
	// Localhost is the localhost node-port decision, as its String names
	// it ("off", "DNAT", "reject", "proxied"); absent means off.
	Localhost string `json:"localhost,omitempty"`
	// Bound lists every node-port address (IPVS mode).
	Bound []netip.Addr `json:"bound,omitempty"`
}

// encodeLocalhost names a decision; off, the usual one, is left out.
func encodeLocalhost(l desired.LocalhostNodePorts) string {
	if l == desired.LocalhostOff {
		return ""
	}
	return l.String()
}

// decodeLocalhost parses what encodeLocalhost wrote.
func decodeLocalhost(s string) (desired.LocalhostNodePorts, error) {
	if s == "" {
		return desired.LocalhostOff, nil
	}
	for _, l := range []desired.LocalhostNodePorts{desired.LocalhostOff, desired.LocalhostDNAT, desired.LocalhostReject, desired.LocalhostProxied} {
		if l.String() == s {
			return l, nil
		}
	}
	return 0, fmt.Errorf("unknown localhost node-port decision %q", s)
}

// Masquerade is desired.Masquerade.
type Masquerade struct {
	Mark uint32 `json:"mark"`
	All  bool   `json:"all"`
	// LocalMode is "" (no detector), "CIDR", "Interface" or "InterfacePrefix".
	LocalMode      desired.LocalMode `json:"localMode"`
	LocalCIDRs     []netip.Prefix    `json:"localCIDRs,omitempty"`
	LocalInterface string            `json:"localInterface,omitempty"`
}

// ServicePort is desired.ServicePort. AllowedSources keeps the nil/empty
// difference of the State: null means unrestricted, [] means nothing is
// allowed.
type ServicePort struct {
	Namespace           string         `json:"namespace"`
	Name                string         `json:"name"`
	PortName            string         `json:"portName,omitempty"`
	Protocol            proxy.Protocol `json:"protocol"`
	Port                uint16         `json:"port"`
	ClusterIP           netip.Addr     `json:"clusterIP"`
	NodePort            uint16         `json:"nodePort,omitempty"`
	ExternalIPs         []netip.Addr   `json:"externalIPs,omitempty"`
	LoadBalancerIPs     []netip.Addr   `json:"loadBalancerIPs,omitempty"`
	AllowedSources      []netip.Prefix `json:"allowedSources"`
	AffinitySeconds     int32          `json:"affinitySeconds,omitempty"`
	Internal            Dispatch       `json:"internal"`
	External            Dispatch       `json:"external"`
	Cluster             Dispatch       `json:"cluster"`
	InternalLocal       bool           `json:"internalLocal,omitempty"`
	ExternalLocal       bool           `json:"externalLocal,omitempty"`
	Routes              *Routes        `json:"routes,omitempty"`
	HealthCheckNodePort uint16         `json:"healthCheckNodePort,omitempty"`
	// Setting is the mode's own decision for the port (IPVS mode's
	// scheduler), SettingRefused the annotation value it refused. The
	// keys are those of the daemons that named only the scheduler, so
	// that explain reads their dumps alike.
	Setting        string `json:"scheduler,omitempty"`
	SettingRefused string `json:"schedulerIgnored,omitempty"`
	// ExternalBalancing is "random" or "maglev"; absent from an older
	// daemon's dump (read as random).
	ExternalBalancing string `json:"externalBalancing,omitempty"`
	// ExternalForwarding is "snat" or "dsr"; absent from an older daemon's
	// dump (read as snat).
	ExternalForwarding string `json:"externalForwarding,omitempty"`
	// DSR is the port's direct server return, when it has one.
	DSR *DSR `json:"dsr,omitempty"`
}

// Dispatch is desired.Dispatch; Empty is "REJECT" or "DROP".
type Dispatch struct {
	Endpoints []netip.AddrPort `json:"endpoints"`
	Empty     string           `json:"empty"`
}

// HealthCheck is desired.HealthCheck.
type HealthCheck struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Port       uint16 `json:"port"`
	LocalReady int    `json:"localReady"`
}

// Encode turns a State into its wire form, service ports sorted by name.
func Encode(s *desired.State, syncedAt time.Time) State {
	out := encodeHead(s, syncedAt)
	out.Services = make([]ServicePort, 0, s.Services.Len())
	for _, name := range sortedNames(s) {
		out.Services = append(out.Services, EncodePort(s.Service(name)))
	}
	return out
}

// sortedNames are the State's service ports in the order of the wire form.
func sortedNames(s *desired.State) []proxy.ServicePortName {
	return slices.SortedFunc(s.Services.Keys(), proxy.ServicePortName.Compare)
}

// encodeHead is Encode without the service ports (Services empty).
func encodeHead(s *desired.State, syncedAt time.Time) State {
	out := State{
		Family:   s.Family,
		SyncedAt: syncedAt,
		NodeIPs:  s.NodeIPs,
		NodePorts: NodePorts{All: s.NodePorts.All, IPs: s.NodePorts.IPs, Localhost: encodeLocalhost(s.NodePorts.Localhost),
			Bound: s.NodePorts.Bound},
		Masquerade: Masquerade{Mark: s.Masquerade.Mark, All: s.Masquerade.All,
			LocalMode: s.Masquerade.Local.Mode, LocalCIDRs: s.Masquerade.Local.CIDRs,
			LocalInterface: s.Masquerade.Local.Interface},
		ServiceCIDRs:   s.ServiceCIDRs,
		Services:       []ServicePort{},
		Peers:          s.Peers,
		ClusterSources: s.ClusterSources,
	}
	for _, hc := range s.HealthChecks {
		out.HealthChecks = append(out.HealthChecks, HealthCheck{Namespace: hc.Service.Namespace,
			Name: hc.Service.Name, Port: hc.Port, LocalReady: hc.LocalReady})
	}
	return out
}

// EncodePort returns the wire form of sp.
func EncodePort(sp *desired.ServicePort) ServicePort {
	out := ServicePort{
		Namespace: sp.Name.Namespace, Name: sp.Name.Name, PortName: sp.Name.Port,
		Protocol: sp.Protocol, Port: sp.Port, ClusterIP: sp.ClusterIP, NodePort: sp.NodePort,
		ExternalIPs: sp.ExternalIPs, LoadBalancerIPs: sp.LoadBalancerIPs,
		AllowedSources: sp.AllowedSources, AffinitySeconds: sp.AffinitySeconds,
		Internal: encodeDispatch(sp.Internal), External: encodeDispatch(sp.External),
		Cluster: encodeDispatch(sp.Cluster), InternalLocal: sp.InternalLocal, ExternalLocal: sp.ExternalLocal,
		Routes:              encodeRoutes(sp.Routes),
		HealthCheckNodePort: sp.HealthCheckNodePort,
		ExternalBalancing:   sp.ExternalBalancing.String(),
		ExternalForwarding:  sp.ExternalForwarding.String(),
		DSR:                 encodeDSR(sp.DSR),
	}
	if sp.Setting != nil {
		out.Setting, out.SettingRefused = sp.Setting.Value, sp.Setting.Refused
	}
	return out
}

func encodeDispatch(d desired.Dispatch) Dispatch {
	out := Dispatch{Endpoints: make([]netip.AddrPort, 0, len(d.Endpoints)), Empty: d.Empty.String()}
	for _, ep := range d.Endpoints {
		out.Endpoints = append(out.Endpoints, ep.AddrPort())
	}
	return out
}

// Decode turns the wire form back into a desired.State (Changed nil).
func (w State) Decode() (*desired.State, error) {
	if w.Family != proxy.IPv4 && w.Family != proxy.IPv6 {
		return nil, fmt.Errorf("unknown IP family %q", w.Family)
	}
	localhost, err := decodeLocalhost(w.NodePorts.Localhost)
	if err != nil {
		return nil, err
	}
	s := &desired.State{
		Family:  w.Family,
		NodeIPs: w.NodeIPs,
		NodePorts: desired.NodePortAddrs{All: w.NodePorts.All, IPs: w.NodePorts.IPs, Localhost: localhost,
			Bound: w.NodePorts.Bound},
		Masquerade: desired.Masquerade{Mark: w.Masquerade.Mark, All: w.Masquerade.All,
			Local: desired.LocalDetector{Mode: w.Masquerade.LocalMode,
				CIDRs: w.Masquerade.LocalCIDRs, Interface: w.Masquerade.LocalInterface}},
		ServiceCIDRs:   w.ServiceCIDRs,
		Peers:          w.Peers,
		ClusterSources: w.ClusterSources,
	}
	var services model.PortMapEditor[*desired.ServicePort]
	for _, p := range w.Services {
		sp, err := p.Decode()
		if err != nil {
			return nil, err
		}
		services.Set(sp.Name, sp)
	}
	s.Services = services.Done()
	for _, hc := range w.HealthChecks {
		s.HealthChecks = append(s.HealthChecks, desired.HealthCheck{
			Service: proxy.ServiceName{Namespace: hc.Namespace, Name: hc.Name},
			Port:    hc.Port, LocalReady: hc.LocalReady})
	}
	return s, nil
}

// Decode returns the service port p encodes.
func (p ServicePort) Decode() (*desired.ServicePort, error) {
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: p.Namespace, Name: p.Name},
		Port: p.PortName, Protocol: p.Protocol}
	var ds [3]desired.Dispatch
	for i, d := range []Dispatch{p.Internal, p.External, p.Cluster} {
		var err error
		if ds[i], err = d.decode(); err != nil {
			return nil, fmt.Errorf("service port %s: %w", name, err)
		}
	}
	routes, err := p.Routes.decode()
	if err != nil {
		return nil, fmt.Errorf("service port %s: %w", name, err)
	}
	balancing := proxy.BalanceDefault
	if p.ExternalBalancing != "" {
		if balancing, err = proxy.ParseBalancing(p.ExternalBalancing); err != nil {
			return nil, fmt.Errorf("service port %s: %w", name, err)
		}
	}
	forwarding, err := decodeForwarding(p.ExternalForwarding)
	if err != nil {
		return nil, fmt.Errorf("service port %s: %w", name, err)
	}
	dsr, err := p.DSR.decode()
	if err != nil {
		return nil, fmt.Errorf("service port %s: %w", name, err)
	}
	out := &desired.ServicePort{
		Name: name, Protocol: p.Protocol, Port: p.Port, ClusterIP: p.ClusterIP, NodePort: p.NodePort,
		ExternalIPs: p.ExternalIPs, LoadBalancerIPs: p.LoadBalancerIPs,
		AllowedSources: p.AllowedSources, AffinitySeconds: p.AffinitySeconds,
		Internal: ds[0], External: ds[1], Cluster: ds[2], InternalLocal: p.InternalLocal, ExternalLocal: p.ExternalLocal,
		Routes:              routes,
		HealthCheckNodePort: p.HealthCheckNodePort,
		ExternalBalancing:   balancing,
		ExternalForwarding:  forwarding,
		DSR:                 dsr,
	}
	if p.Setting != "" || p.SettingRefused != "" {
		out.Setting = &desired.PortSetting{Value: p.Setting, Refused: p.SettingRefused}
	}
	return out, nil
}

func (d Dispatch) decode() (desired.Dispatch, error) {
	var out desired.Dispatch
	switch d.Empty {
	case desired.Reject.String():
		out.Empty = desired.Reject
	case desired.Drop.String():
		out.Empty = desired.Drop
	default:
		return out, fmt.Errorf("unknown empty verdict %q", d.Empty)
	}
	for _, ep := range d.Endpoints {
		out.Endpoints = append(out.Endpoints, desired.Endpoint{IP: ep.Addr(), Port: ep.Port()})
	}
	return out, nil
}
