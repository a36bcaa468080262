package ipvs

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// DummyLink is the link that holds every cluster, external and LB IP, so
// that the kernel treats them as local and IPVS sees their traffic.
const DummyLink = "kube-ipvs0"

// The ipsets, under upstream's names (contract §5.3). IPv6 sets carry the
// prefix "KUBE-6-" instead of "KUBE-".
const (
	setLoopBack            = "KUBE-LOOP-BACK"
	setClusterIP           = "KUBE-CLUSTER-IP"
	setExternalIP          = "KUBE-EXTERNAL-IP"
	setExternalIPLocal     = "KUBE-EXTERNAL-IP-LOCAL"
	setLoadBalancer        = "KUBE-LOAD-BALANCER"
	setLoadBalancerLocal   = "KUBE-LOAD-BALANCER-LOCAL"
	setLoadBalancerFW      = "KUBE-LOAD-BALANCER-FW"
	setLBSourceIP          = "KUBE-LOAD-BALANCER-SOURCE-IP"
	setLBSourceCIDR        = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
	setNodePortTCP         = "KUBE-NODE-PORT-TCP"
	setNodePortLocalTCP    = "KUBE-NODE-PORT-LOCAL-TCP"
	setNodePortUDP         = "KUBE-NODE-PORT-UDP"
	setNodePortLocalUDP    = "KUBE-NODE-PORT-LOCAL-UDP"
	setNodePortSCTP        = "KUBE-NODE-PORT-SCTP-HASH"
	setNodePortLocalSCTP   = "KUBE-NODE-PORT-LOCAL-SCTP-HASH"
	setHealthCheckNodePort = "KUBE-HEALTH-CHECK-NODE-PORT"
	setIPVSIPs             = "KUBE-IPVS-IPS"
)

// setSpec is one ipset with its upstream comment.
type setSpec struct {
	name    string
	typ     kipset.Type
	comment string
}

// setSpecs lists every set in a fixed order (the order Init creates them).
var setSpecs = []setSpec{
	{setLoopBack, kipset.HashIPPortIP, "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"},
	{setClusterIP, kipset.HashIPPort, "Kubernetes service cluster ip + port for masquerade purpose"},
	{setExternalIP, kipset.HashIPPort, "Kubernetes service external ip + port for masquerade and filter purpose"},
	{setExternalIPLocal, kipset.HashIPPort, "Kubernetes service external ip + port with externalTrafficPolicy=local"},
	{setLoadBalancer, kipset.HashIPPort, "Kubernetes service lb portal"},
	{setLoadBalancerLocal, kipset.HashIPPort, "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"},
	{setLoadBalancerFW, kipset.HashIPPort, "Kubernetes service load balancer ip + port for load balancer with sourceRange"},
	{setLBSourceIP, kipset.HashIPPortIP, "Kubernetes service load balancer ip + port + source IP for packet filter purpose"},
	{setLBSourceCIDR, kipset.HashIPPortNet, "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"},
	{setNodePortTCP, kipset.BitmapPort, "Kubernetes nodeport TCP port for masquerade purpose"},
	{setNodePortLocalTCP, kipset.BitmapPort, "Kubernetes nodeport TCP port with externalTrafficPolicy=local"},
	{setNodePortUDP, kipset.BitmapPort, "Kubernetes nodeport UDP port for masquerade purpose"},
	{setNodePortLocalUDP, kipset.BitmapPort, "Kubernetes nodeport UDP port with externalTrafficPolicy=local"},
	{setNodePortSCTP, kipset.HashIPPort, "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"},
	{setNodePortLocalSCTP, kipset.HashIPPort, "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"},
	{setHealthCheckNodePort, kipset.BitmapPort, "Kubernetes health check node port"},
	{setIPVSIPs, kipset.HashIP, "Kubernetes service ip addresses bound to the dummy link"},
}

// maxSetName is the longest ipset name the kernel takes (IPSET_MAXNAMELEN
// less the terminating NUL).
const maxSetName = 31

// setName returns the family's name of an IPv4 set name. Like upstream, a
// name that grows too long is truncated: KUBE-6-LOAD-BALANCER-SOURCE-CID and
// KUBE-6-NODE-PORT-LOCAL-SCTP-HAS are what other tools see.
func setName(family proxy.IPFamily, base string) string {
	if family == proxy.IPv6 {
		base = "KUBE-6-" + base[len("KUBE-"):]
	}
	if len(base) > maxSetName {
		base = base[:maxSetName]
	}
	return base
}

// The iptables chains, upstream's names.
const (
	chainServices             = "KUBE-SERVICES"
	chainPostrouting          = "KUBE-POSTROUTING"
	chainNodePort             = "KUBE-NODE-PORT"
	chainLoadBalancer         = "KUBE-LOAD-BALANCER"
	chainMarkMasq             = "KUBE-MARK-MASQ"
	chainForward              = "KUBE-FORWARD"
	chainProxyFirewall        = "KUBE-PROXY-FIREWALL"
	chainSourceRangesFirewall = "KUBE-SOURCE-RANGES-FIREWALL"
	chainIPVSFilter           = "KUBE-IPVS-FILTER"
	chainIPVSOutFilter        = "KUBE-IPVS-OUT-FILTER"
)

// SetsFor lists the ipsets, under the family's names, that hold a member
// for traffic to dest:port of sp, in the order Sync renders them from st:
// what `svcproxy explain` shows. It asks the renderer itself (dest
// standing in for the node-port addresses), so the names cannot drift from
// it.
func SetsFor(st *desired.State, sp *desired.ServicePort, dest netip.Addr, port uint16) []string {
	cfg := newRenderConfig(st)
	cfg.nodePortAddrs = []netip.Addr{dest}
	var out []string
	for _, e := range renderService(cfg, sp).entries {
		ip, p := e.entry.IP, e.entry.Port
		// A member for the frontend's address and port, for its port on
		// any address (bitmap:port node ports), or for its address alone
		// (KUBE-IPVS-IPS).
		hit := (p == port && (ip == dest || !ip.IsValid())) || (ip == dest && p == 0)
		if hit && !slices.Contains(out, e.set) {
			out = append(out, e.set)
		}
	}
	return out
}
