// Package desired decides, as a pure function, what the dataplane of one IP
// family must do: which frontends each service port has, which endpoints serve
// internal and external traffic, what happens when there are none, and what is
// masqueraded. Backends render a State; they decide no policy of their own.
package desired

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// State is everything one backend needs to program one IP family.
// A State and everything reachable from it is immutable once returned:
// unchanged service ports, and the shards of Services that hold only such
// ports, are shared, by pointer, between successive States.
type State struct {
	Family proxy.IPFamily

	// NodeIPs are this node's IPs of this family, primary first.
	NodeIPs []netip.Addr
	// NodePorts says on which destination addresses node ports answer.
	NodePorts NodePortAddrs
	// Masquerade says which traffic is source-NATed.
	Masquerade Masquerade
	// ServiceCIDRs are the service IP ranges of this family, sorted and
	// without overlaps; new connections to an address in them that no
	// Service holds are dropped (nftables, as upstream's).
	ServiceCIDRs []netip.Prefix
	// Peers are the addresses of this family of the nodes that
	// decapsulate DSR tunnels (Node.Peers), sorted; empty unless
	// Options.DSR.
	Peers []netip.Addr
	// ClusterSources are the sources of this family inside the cluster:
	// every Node's addresses and pod CIDRs (Node.ClusterSources) and the
	// local-traffic detector's CIDRs, sorted, none inside another; empty
	// unless Options.DSR. Their flows are never tunnelled: the endpoint's
	// node would answer them on a path its tc programs do not see (to a
	// pod or the host beside the endpoint, or through an overlay), so the
	// answer would not be translated back to the frontend.
	ClusterSources []netip.Prefix

	// Services holds every service port with a cluster IP of this family.
	// It is a persistent map (model.PortMap: Get, All, Len), so that an
	// incremental Compute allocates for the ports it changes, not for all.
	Services model.PortMap[*ServicePort]
	// HealthChecks lists the healthCheckNodePort servers this node must run,
	// sorted by service name.
	HealthChecks []HealthCheck
	// healthPorts holds, for each of HealthChecks in order, the service's
	// ports with their ready local endpoints, so that the next incremental
	// Compute recounts only the services whose ports changed.
	healthPorts [][]portReady

	// Lost lists, per service port, the external and LB frontends it
	// claims but does not get, because a higher claim holds the same
	// address, protocol and port, or because the address is one of the
	// node's own (claims.go). Their ServicePorts already lack them; this
	// says why, for Events.
	Lost map[proxy.ServicePortName][]LostFrontend
	// claims holds the winner of every external or LB frontend claimed,
	// so that the next incremental Compute can tell whether its changes
	// touch any contest (claims.go).
	claims map[frontendKey]claim
	// clusterNodeIPs are the Node.ClusterNodeIPs the claims were decided
	// with: when the next Compute's differ, it decides them again.
	clusterNodeIPs []netip.Addr
	// peers are the Node.Peers the ports' DSRs were decided with: when the
	// next Compute's differ, it decides those ports again.
	peers []Peer
	// clusterSources are the Node.ClusterSources ClusterSources was made
	// from: the next Compute with the same ones keeps it.
	clusterSources []netip.Prefix
	// claimedFrom are the snapshot's service ports the claims hold for:
	// the next Compute compares a changed port's frontends with its
	// version here. Shared with the snapshot, never copied.
	claimedFrom model.PortMap[*model.ServicePort]

	// Changed holds the service ports whose ServicePort differs from the
	// prev State Compute was given. nil means "unknown" (computed from
	// scratch): readers of the difference look at every port, and the
	// syncer, which alone decides how a backend syncs, makes the sync full.
	Changed map[proxy.ServicePortName]struct{}
}

// NodePortAddrs selects the destination addresses that accept node ports.
type NodePortAddrs struct {
	// All means every local address of the node except loopback
	// (nodePortAddresses unset in iptables/ipvs mode, or 0.0.0.0/0, ::/0).
	All bool
	// IPs lists the accepting addresses when All is false. It holds a
	// loopback address only with Localhost LocalhostDNAT.
	IPs []netip.Addr
	// Bound lists, with Options.BindNodePorts, every address node ports
	// answer on, resolved against the host's addresses (All: all of them):
	// what a backend that binds each address (IPVS virtual servers) uses.
	// Loopback is left out unless DNATed, link-local always (upstream's
	// IPVS mode leaves them out: an IPv6 one needs a zone, which a virtual
	// server's address cannot carry).
	Bound []netip.Addr
	// Localhost is what happens to node-port traffic to a loopback
	// address (DecideLocalhost); with All, loopback answers only under
	// LocalhostDNAT.
	Localhost LocalhostNodePorts
}

// Equal reports whether two selections accept the same addresses alike.
func (n NodePortAddrs) Equal(o NodePortAddrs) bool {
	return n.All == o.All && slices.Equal(n.IPs, o.IPs) && n.Localhost == o.Localhost &&
		slices.Equal(n.Bound, o.Bound)
}

// Masquerade describes source NAT policy.
type Masquerade struct {
	// Mark is the packet mark, 1<<masqueradeBit, set on traffic to be SNATed.
	Mark uint32
	// All masquerades every packet to a cluster IP (masqueradeAll).
	All bool
	// Local tells pod-originated traffic apart from the rest. Cluster-IP
	// traffic that is not local is masqueraded (unless Local.Mode is
	// LocalNone, in which case only All and hairpin masquerade).
	Local LocalDetector
}

// LocalMode is how pod-originated traffic is recognized.
type LocalMode string

// The local-traffic detection modes. ClusterCIDR and NodeCIDR both become
// LocalCIDR with the relevant prefixes.
const (
	LocalNone            LocalMode = ""
	LocalCIDR            LocalMode = "CIDR"
	LocalInterface       LocalMode = "Interface"
	LocalInterfacePrefix LocalMode = "InterfacePrefix"
)

// LocalDetector recognizes traffic from pods on this node or cluster.
type LocalDetector struct {
	Mode LocalMode
	// CIDRs are this family's pod prefixes (LocalCIDR).
	CIDRs []netip.Prefix
	// Interface is the bridge name (LocalInterface) or name prefix
	// (LocalInterfacePrefix) of pod interfaces.
	Interface string
}

// ServicePort is what the dataplane does for one service port in one family.
type ServicePort struct {
	Name     proxy.ServicePortName
	Protocol proxy.Protocol
	Port     uint16
	// NodePort is 0 when the port has none. (The small fields share words:
	// Port, NodePort, HealthCheckNodePort and the two methods one;
	// AffinitySeconds and the two policies another. ServicePort then stays
	// within the 320-byte malloc size class, TestServicePortSize.)
	NodePort uint16
	// HealthCheckNodePort is non-zero for eTP=Local LoadBalancer services.
	HealthCheckNodePort uint16
	// ExternalBalancing is how a new flow of External picks its endpoint:
	// the Service's annotation svcproxy.io/external-lb-algorithm, else
	// Options.ExternalBalancing; never BalanceDefault from Compute (a port
	// built by hand may leave it so, which reads as random). Only ebpf
	// mode's tc programs render it (pkg/pipeline/backends/ebpf/nodeport, experimental);
	// everywhere else traffic is balanced at random, as kube-proxy does,
	// and explain shows it.
	ExternalBalancing proxy.Balancing
	// ExternalForwarding is how External reaches an endpoint on another
	// node: the annotation svcproxy.io/external-forwarding, else
	// Options.ExternalForwarding; never ForwardDefault from Compute. DSR
	// says whether it applies here.
	ExternalForwarding proxy.Forwarding

	// ClusterIP is this family's cluster IP; always valid.
	ClusterIP netip.Addr
	// ExternalIPs and LoadBalancerIPs are this family's external frontends.
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []netip.Addr
	// AllowedSources, when non-nil, restricts traffic to LoadBalancerIPs to
	// these source prefixes; anything else is dropped. It already includes the
	// LB IPs themselves where node-originated traffic must pass. Node ports
	// and external IPs are never filtered.
	AllowedSources []netip.Prefix

	// AffinitySeconds is the ClientIP session affinity timeout; 0 means none.
	AffinitySeconds int32

	// InternalLocal is internalTrafficPolicy: Local: Internal holds only
	// local endpoints. Backends that name chains after the policy (iptables'
	// KUBE-SVL) need it even when every endpoint happens to be local.
	InternalLocal bool
	// ExternalLocal is externalTrafficPolicy: Local: External holds only
	// local endpoints and its traffic keeps the client source IP.
	// Otherwise all external traffic is masqueraded.
	ExternalLocal bool

	// Internal serves traffic to the cluster IP.
	Internal Dispatch
	// External serves traffic to node ports, external IPs and LB IPs that
	// comes from outside this node (and, unless ExternalLocal, from inside).
	External Dispatch
	// Cluster is the cluster-wide endpoint choice (ready, else serving and
	// terminating, topology applied). With ExternalLocal, traffic to
	// external frontends from a local pod, or from the node itself, is
	// short-circuited here; node-originated traffic is also masqueraded.
	Cluster Dispatch
	// Routes decide, per path and source class, which of Internal, External
	// and Cluster serves a new connection and whether it is masqueraded
	// (DecideRoutes). Backends render them; they decide nothing of their own.
	// Compute points every port at one of a few shared, immutable tables;
	// nil (a port built by hand) is decided by State.RoutesOf.
	Routes *Routes

	// DSR is how External reaches endpoints on peer nodes by direct server
	// return; nil unless it applies (dsr.go). A pointer, so that ports
	// without it stay small.
	DSR *DSR

	// Setting is the mode's own decision for the port (Options.PortSettings:
	// IPVS mode's scheduler); nil when the mode has none. Only the mode's
	// backend reads it.
	Setting *PortSetting
}

// PortName returns sp.Name (zero for a nil sp): State.Services holds each
// port under its own name and need not store the name again
// (model.PortNamer).
func (sp *ServicePort) PortName() proxy.ServicePortName {
	if sp == nil {
		return proxy.ServicePortName{}
	}
	return sp.Name
}

// Dispatch is a set of endpoints to balance over, and what to do with none.
type Dispatch struct {
	// Endpoints is sorted by address then port, without duplicates. It may
	// be the model's own list, shared by successive States: never modify it.
	Endpoints []Endpoint
	// Empty is the verdict when Endpoints is empty: Reject when the service
	// has no usable endpoint anywhere, Drop when a Local policy leaves none
	// on this node. Unused when Endpoints is non-empty.
	Empty Verdict
}

// Verdict is the fate of a new connection. A Dispatch's Empty verdict is
// Reject or Drop; Evaluate's outcome may be any.
type Verdict uint8

// The verdicts. Reject is the zero value, so that a Dispatch without
// endpoints rejects unless Compute decided otherwise.
const (
	// Reject answers with ICMP port unreachable (TCP: connection refused).
	Reject Verdict = iota
	// Drop silently discards.
	Drop
	// DNAT sends the connection to one of a dispatch's endpoints.
	DNAT
	// Accept leaves the packet alone: no service frontend matched.
	Accept
)

// String names the verdict as nft and iptables spell it.
func (v Verdict) String() string {
	switch v {
	case Drop:
		return "DROP"
	case DNAT:
		return "DNAT"
	case Accept:
		return "ACCEPT"
	}
	return "REJECT"
}

// Endpoint is one backend address and port. It is the type of the model's
// lists, so that a dispatch over all of a port's endpoints shares the
// model's list (categorize).
type Endpoint = proxy.Endpoint

// HealthCheck is one healthCheckNodePort server for an eTP=Local service.
type HealthCheck struct {
	Service proxy.ServiceName
	Port    uint16
	// LocalReady counts ready (not merely serving) endpoints on this node,
	// over all the service's ports: the X-Load-Balancing-Endpoint-Weight.
	LocalReady int
}

// Service returns the service port name, or nil when the State has none.
func (s *State) Service(name proxy.ServicePortName) *ServicePort {
	sp, _ := s.Services.Get(name)
	return sp
}
