package model

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// defaultAffinitySeconds is the API server's default ClientIP affinity
// timeout, used when a Service asks for ClientIP affinity without a config.
const defaultAffinitySeconds = 10800

// ExtensionDomain is the domain of svcproxy's extension annotations: a
// key whose prefix is it or a subdomain of it (ipvs.svcproxy.io/…) is kept
// in ServicePort.Extensions.
const ExtensionDomain = "svcproxy.io"

// ExternalBalancingAnnotation is svcproxy's per-Service choice of how
// external traffic picks an endpoint (proxy.Balancing: random or maglev).
const ExternalBalancingAnnotation = "svcproxy.io/external-lb-algorithm"

// ExternalForwardingAnnotation is svcproxy's per-Service choice of how
// external traffic reaches an endpoint on another node (proxy.Forwarding:
// snat or dsr).
const ExternalForwardingAnnotation = "svcproxy.io/external-forwarding"

// ParseService returns the service ports that a proxier of family must
// handle for svc, each holding only that family's addresses. It returns none
// for Services kube-proxy skips: ExternalName, headless (clusterIP "None" or
// ""), and those without a valid cluster IP of family.
//
// Invalid parts (an unparsable IP, range or port) are dropped and reported in
// problems; the rest of the Service is still used.
func ParseService(svc *v1.Service, family proxy.IPFamily) (ports []*ServicePort, problems []error) {
	if svc == nil || skipService(svc) {
		return nil, nil
	}
	p := &problemList{}
	clusterIPs := parseIPs(p, "InvalidClusterIP", "spec.clusterIPs", clusterIPsOf(svc), family)
	if len(clusterIPs) == 0 {
		return nil, p.errs
	}
	common := ServicePort{
		ClusterIPs:          clusterIPs,
		ExternalIPs:         parseIPs(p, "InvalidExternalIP", "spec.externalIPs", svc.Spec.ExternalIPs, family),
		LoadBalancerIPs:     parseIPs(p, "InvalidLoadBalancerIngressIP", "status.loadBalancer.ingress.ip", vipIngressIPs(svc), family),
		AffinitySeconds:     affinitySeconds(svc),
		InternalLocal:       internalLocal(svc),
		ExternalLocal:       externalLocal(svc),
		TrafficDistribution: trafficDistribution(svc),
		Extensions:          extensionsOf(svc),
		ExternalBalancing: nodeDefaultChoice(p, svc, ExternalBalancingAnnotation, "InvalidExternalLBAlgorithm",
			proxy.ParseBalancing),
		ExternalForwarding: nodeDefaultChoice(p, svc, ExternalForwardingAnnotation, "InvalidExternalForwarding",
			proxy.ParseForwarding),
		Created: createdOf(svc),
	}
	common.SourceRanges, common.SourceRangesInvalid = parseRanges(p, svc.Spec.LoadBalancerSourceRanges, family)
	if common.SourceRangesInvalid && len(common.SourceRanges) == 0 {
		p.add("LoadBalancerSourceRangesFailClosed", "spec.loadBalancerSourceRanges",
			fmt.Errorf("no valid %s range: %s traffic to the load balancer IPs is dropped", family, family))
	}
	if common.ExternalLocal && svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		common.HealthCheckNodePort = parsePort(p, svc.Spec.HealthCheckNodePort)
	}

	name := proxy.ServiceName{Namespace: svc.Namespace, Name: svc.Name}
	seen := newSeenPorts(len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		sp, err := parseServicePort(name, &svc.Spec.Ports[i], &common)
		if err == nil {
			err = seen.add(sp)
		}
		if err != nil {
			p.add("InvalidServicePort", fmt.Sprintf("spec.ports[%d]", i), err)
			continue
		}
		ports = append(ports, sp)
	}
	return ports, p.errs
}

// seenPorts refuses a port that repeats an earlier one's name, port or
// node port (each with the protocol), as the API server's validation does.
// Two service ports on one frontend would lead it to two places: nft
// refuses the second map element ("File exists") and the whole sync with
// it, iptables and IPVS let whichever is rendered last win. The first one
// in spec order is kept.
type seenPorts struct {
	names     map[proxy.ServicePortName]bool
	ports     map[protoPort]bool
	nodePorts map[protoPort]bool
}

type protoPort struct {
	proto proxy.Protocol
	port  uint16
}

func newSeenPorts(n int) *seenPorts {
	return &seenPorts{names: make(map[proxy.ServicePortName]bool, n), ports: make(map[protoPort]bool, n), nodePorts: map[protoPort]bool{}}
}

func (s *seenPorts) add(sp *ServicePort) error {
	port, nodePort := protoPort{sp.Name.Protocol, sp.Port}, protoPort{sp.Name.Protocol, sp.NodePort}
	switch {
	case s.names[sp.Name]:
		return fmt.Errorf("duplicate port %q/%s", sp.Name.Port, sp.Name.Protocol)
	case s.ports[port]:
		return fmt.Errorf("port %q: duplicate port number %d/%s", sp.Name.Port, sp.Port, sp.Name.Protocol)
	case sp.NodePort != 0 && s.nodePorts[nodePort]:
		return fmt.Errorf("port %q: duplicate nodePort %d/%s", sp.Name.Port, sp.NodePort, sp.Name.Protocol)
	}
	s.names[sp.Name], s.ports[port] = true, true
	if sp.NodePort != 0 {
		s.nodePorts[nodePort] = true
	}
	return nil
}

// extensionsOf returns the Service's extension annotations, values
// trimmed, blank ones left out; nil when there are none, so that most
// Services allocate nothing for them. Their meaning is the mode's to
// decide (desired.PortSettings), so none is validated here.
func extensionsOf(svc *v1.Service) map[string]string {
	var keys []string
	for k, v := range svc.Annotations {
		domain, _, ok := strings.Cut(k, "/")
		if !ok || (domain != ExtensionDomain && !strings.HasSuffix(domain, "."+ExtensionDomain)) ||
			k == ExternalBalancingAnnotation || k == ExternalForwardingAnnotation || // decided here, for every mode
			strings.TrimSpace(v) == "" {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil
	}
	// The API bounds a Service's annotations by their total size only: a
	// tenant could fill it with keys under our domain, which a map would
	// hold at several times their size for every such Service. The keys
	// kept are the first in order, so the choice is the same on every node
	// and every update.
	slices.Sort(keys)
	keys = keys[:min(len(keys), maxExtensions)]
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = boundedExtension(strings.TrimSpace(svc.Annotations[k]))
	}
	return out
}

// maxExtensions is how many extension annotations a Service keeps; every
// mode reads one at most.
const maxExtensions = 8

// maxExtensionValue bounds a kept value: no mode accepts a longer one, and
// one cut short and marked stays one no mode accepts, so the mode's Event
// still tells the Service's owner.
const maxExtensionValue = 64

func boundedExtension(v string) string {
	if len(v) <= maxExtensionValue {
		return v
	}
	return strings.ToValidUTF8(v[:maxExtensionValue], "") + "…"
}

// nodeDefaultChoice returns what the annotation key of svc names, parsed;
// absent or blank leaves it to the node (the zero value), and an unknown
// value is reported as reason and left to the node too, like any other
// field the Service's owner can get wrong. The external balancing
// algorithm and forwarding method are such choices.
func nodeDefaultChoice[T any](p *problemList, svc *v1.Service, key, reason string, parse func(string) (T, error)) T {
	v := svc.Annotations[key]
	if strings.TrimSpace(v) == "" {
		var none T
		return none
	}
	choice, err := parse(v)
	if err != nil {
		p.add(reason, "metadata.annotations["+key+"]", fmt.Errorf("%w: the node's default applies", err))
	}
	return choice
}

// createdOf returns creationTimestamp in Unix seconds, 0 when unset.
func createdOf(svc *v1.Service) int64 {
	if svc.CreationTimestamp.IsZero() {
		return 0
	}
	return svc.CreationTimestamp.Unix()
}

func skipService(svc *v1.Service) bool {
	return svc.Spec.Type == v1.ServiceTypeExternalName ||
		svc.Spec.ClusterIP == v1.ClusterIPNone || svc.Spec.ClusterIP == ""
}

func clusterIPsOf(svc *v1.Service) []string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs
	}
	return []string{svc.Spec.ClusterIP}
}

func parseServicePort(svc proxy.ServiceName, port *v1.ServicePort, common *ServicePort) (*ServicePort, error) {
	protocol, err := parseProtocol(port.Protocol)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", port.Name, err)
	}
	if port.Port <= 0 || port.Port > 65535 {
		return nil, fmt.Errorf("port %q: invalid port number %d", port.Name, port.Port)
	}
	if port.NodePort < 0 || port.NodePort > 65535 {
		return nil, fmt.Errorf("port %q: invalid nodePort %d", port.Name, port.NodePort)
	}
	sp := *common
	sp.Name = proxy.ServicePortName{ServiceName: svc, Port: port.Name, Protocol: protocol}
	sp.Port = uint16(port.Port)
	sp.NodePort = uint16(port.NodePort)
	return &sp, nil
}

// parseProtocol accepts the protocols kube-proxy proxies; the API defaults an
// empty protocol to TCP.
func parseProtocol(p v1.Protocol) (proxy.Protocol, error) {
	switch p {
	case v1.ProtocolTCP, "":
		return proxy.TCP, nil
	case v1.ProtocolUDP:
		return proxy.UDP, nil
	case v1.ProtocolSCTP:
		return proxy.SCTP, nil
	}
	return "", fmt.Errorf("unsupported protocol %q", p)
}

// vipIngressIPs returns the ingress IPs that get rules: ipMode VIP or unset.
// ipMode Proxy means the load balancer delivers to the node itself.
func vipIngressIPs(svc *v1.Service) []string {
	var ips []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		if ing.IPMode == nil || *ing.IPMode == v1.LoadBalancerIPModeVIP {
			ips = append(ips, ing.IP)
		}
	}
	return ips
}

func affinitySeconds(svc *v1.Service) int32 {
	if svc.Spec.SessionAffinity != v1.ServiceAffinityClientIP {
		return 0
	}
	cfg := svc.Spec.SessionAffinityConfig
	if cfg == nil || cfg.ClientIP == nil || cfg.ClientIP.TimeoutSeconds == nil || *cfg.ClientIP.TimeoutSeconds <= 0 {
		return defaultAffinitySeconds
	}
	return *cfg.ClientIP.TimeoutSeconds
}

func internalLocal(svc *v1.Service) bool {
	p := svc.Spec.InternalTrafficPolicy
	return p != nil && *p == v1.ServiceInternalTrafficPolicyLocal
}

// externalLocal mirrors upstream's ExternalPolicyLocal: the policy only
// matters for a Service that can be reached from outside at all.
func externalLocal(svc *v1.Service) bool {
	reachable := svc.Spec.Type == v1.ServiceTypeLoadBalancer ||
		svc.Spec.Type == v1.ServiceTypeNodePort ||
		len(svc.Spec.ExternalIPs) > 0
	return reachable && svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
}

func trafficDistribution(svc *v1.Service) TrafficDistribution {
	if td := svc.Spec.TrafficDistribution; td != nil {
		switch *td {
		case v1.ServiceTrafficDistributionPreferClose, v1.ServiceTrafficDistributionPreferSameZone:
			return DistributePreferZone
		case v1.ServiceTrafficDistributionPreferSameNode:
			return DistributePreferSameNode
		}
	}
	mode, ok := svc.Annotations[v1.AnnotationTopologyMode]
	if !ok {
		mode = svc.Annotations[v1.DeprecatedAnnotationTopologyAwareHints]
	}
	if mode == "Auto" || mode == "auto" {
		return DistributePreferZone
	}
	return DistributeAnywhere
}

func parsePort(p *problemList, port int32) uint16 {
	if port < 0 || port > 65535 {
		p.add("InvalidHealthCheckNodePort", "spec.healthCheckNodePort", fmt.Errorf("invalid port %d", port))
		return 0
	}
	return uint16(port)
}
