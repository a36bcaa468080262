// Package model turns Service and EndpointSlice objects into immutable,
// validated values, and tracks changes to them between syncs.
//
// Parsing happens here, once. Everything downstream (desired, the backends)
// works on these values and never sees an API object.
package model

import (
	"net/netip"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ServicePort is one port of one Service, parsed and validated. Values are
// immutable once built: the tracker replaces them, it never edits them.
type ServicePort struct {
	Name proxy.ServicePortName

	// ClusterIPs holds spec.clusterIPs (one per family at most).
	ClusterIPs []netip.Addr
	// ExternalIPs holds the valid entries of spec.externalIPs.
	ExternalIPs []netip.Addr
	// LoadBalancerIPs holds status.loadBalancer.ingress[].ip whose ipMode is
	// VIP or unset; ipMode Proxy gets no rules.
	LoadBalancerIPs []netip.Addr
	// SourceRanges holds the trimmed, valid loadBalancerSourceRanges of
	// the family, masked.
	SourceRanges []netip.Prefix
	// Extensions are the Service's svcproxy extension annotations (keys
	// under ExtensionDomain, values trimmed; nil when none), shared by its
	// ports. Only a mode's own per-port decision reads them
	// (desired.PortSettings: IPVS mode's ipvs.svcproxy.io/scheduler). A
	// map, one word, rather than a struct of values: the annotations are
	// rare, and the word keeps Created within the same size class.
	Extensions map[string]string
	// Created is metadata.creationTimestamp in Unix seconds (the API's
	// resolution; 0 when unset). Equal claims on one frontend go to the
	// oldest Service (desired/claims.go): the API server sets it, so a
	// tenant cannot choose it the way it chooses a name.
	Created int64

	// The small fields come last, together, so that a ServicePort takes
	// 192 bytes rather than 224 (one per service port).

	Port uint16
	// NodePort is 0 when the port has none.
	NodePort uint16
	// HealthCheckNodePort is spec.healthCheckNodePort when it applies
	// (LoadBalancer with externalTrafficPolicy Local), else 0.
	HealthCheckNodePort uint16
	// ExternalBalancing is what the svcproxy extension annotation
	// svcproxy.io/external-lb-algorithm asks for external traffic;
	// proxy.BalanceDefault (absent or invalid) leaves it to the node.
	ExternalBalancing proxy.Balancing
	// ExternalForwarding is what the svcproxy extension annotation
	// svcproxy.io/external-forwarding asks for external traffic to other
	// nodes; proxy.ForwardDefault (absent or invalid) leaves it to the node.
	ExternalForwarding proxy.Forwarding
	// AffinitySeconds is the ClientIP affinity timeout; 0 means none.
	AffinitySeconds int32
	// SourceRangesInvalid is set when an entry of loadBalancerSourceRanges
	// did not parse. With no valid range of the family left, the firewall
	// must then deny rather than vanish (fail closed).
	SourceRangesInvalid bool
	// InternalLocal is internalTrafficPolicy: Local.
	InternalLocal bool
	// ExternalLocal is externalTrafficPolicy: Local on an externally
	// reachable Service (NodePort, LoadBalancer, or with externalIPs).
	ExternalLocal bool
	// TrafficDistribution is the normalized topology preference.
	TrafficDistribution TrafficDistribution
}

// PortName returns sp.Name (zero for a nil sp): a PortMap holding sp under
// its own name need not store the name again.
func (sp *ServicePort) PortName() proxy.ServicePortName {
	if sp == nil {
		return proxy.ServicePortName{}
	}
	return sp.Name
}

// TrafficDistribution is the endpoint topology preference of a Service.
type TrafficDistribution uint8

// The preferences kube-proxy honours. PreferClose is normalized to
// PreferSameZone, as upstream treats them alike.
const (
	DistributeAnywhere TrafficDistribution = iota
	DistributePreferZone
	DistributePreferSameNode
)

// String names the preference as the API spells it; "" for none.
func (d TrafficDistribution) String() string {
	switch d {
	case DistributePreferZone:
		return "PreferSameZone"
	case DistributePreferSameNode:
		return "PreferSameNode"
	}
	return ""
}

// Endpoint is one address:port serving a service port, in full: what
// NewEndpointList takes and EndpointList.At returns. Lists hold endpoints in
// a compacter form (EndpointList).
type Endpoint struct {
	IP netip.Addr
	// NodeName is the endpoint's node; "" when unknown.
	NodeName string
	// Zone is the endpoint's zone; "" when unknown.
	Zone string

	// ZoneHints and NodeHints are the topology hints; nil when absent.
	ZoneHints []string
	NodeHints []string

	Port        uint16
	Ready       bool
	Serving     bool
	Terminating bool
}

// AddrPort returns the endpoint's address and port.
func (e *Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.IP, e.Port) }

// Snapshot is the complete, immutable view of one IP family's services and
// endpoints at a commit. The values in it must not be modified.
//
// The maps are persistent PortMaps rather than Go maps so that a commit costs
// O(changed services): successive snapshots share everything no change
// touched (a Go map clone of 10k entries costs milliseconds). Use Get, All
// and Len to read them; NewPortMap builds one from a Go map in tests.
type Snapshot struct {
	Family   proxy.IPFamily
	Services PortMap[*ServicePort]
	// Endpoints holds, per service port, its endpoints sorted by address and
	// port, deduplicated across slices; never an empty list. A service port
	// may have endpoints without a Service (the slice arrived first) and
	// vice versa.
	Endpoints PortMap[EndpointList]
}

// Changes describes what a Commit consumed.
type Changes struct {
	// Changed holds every service port whose Service or endpoints differ from
	// the previous commit. Changes that cancel out (A→B→A) are not in it.
	Changed map[proxy.ServicePortName]struct{}
	// TriggerTimes are the endpoints.kubernetes.io/last-change-trigger-time
	// values of the EndpointSlice changes consumed, for
	// kubeproxy_network_programming_duration_seconds.
	TriggerTimes []time.Time
	// ConntrackCleanup is true when a UDP or SCTP service port lost an
	// endpoint or gained its first one, so stale flows may exist. The
	// syncer also sets it after a recovery sync, for flows made while the
	// kernel was without rules.
	ConntrackCleanup bool
}
