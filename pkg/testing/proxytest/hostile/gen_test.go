package hostile

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// gen turns fuzz bytes into API objects, one decision per byte; past the
// end every decision is 0, so any input yields a (possibly small) world.
type gen struct {
	data []byte
	// hugeUsed: this world has its many ports or many endpoints already.
	// One such dimension per world keeps an input's cost bounded: many
	// ports × many endpoints × affinity is ~30k chains, and the fakes'
	// chain deletes are linear in the table, so the fuzzer stalled on it.
	hugeUsed bool
}

func (g *gen) next() int {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return int(b)
}

func (g *gen) n(limit int) int            { return g.next() % limit }
func (g *gen) yes() bool                  { return g.next()%2 == 1 }
func (g *gen) pick(from ...string) string { return from[g.n(len(from))] }

// Hostile spellings. Entries with [1] or [2] verbs are formats (a literal
// % is then %%): %[1]d is the Service's slot (its own cluster IP host
// part), %[2]d another Service's slot: cluster IPs stay unique per family
// after parsing, as the API server allocates them, while every other field
// may collide.
var (
	clusterIPs = []string{
		"172.30.0.%[1]d", "172.030.000.%03[1]d", "::ffff:172.30.0.%[1]d", "fd00:172:30::%[1]x",
		"fd00:172:30::%[1]x%%eth0", "172.30.0.%[1]d%%x\nflush ruleset", "None", "", "bogus", " 172.30.0.%[1]d",
	}
	frontendIPs = []string{
		"198.51.100.1", "198.051.100.001", "::ffff:198.51.100.1", "2001:db8:100::1", "2001:db8:100::1%eth0",
		"198.51.100.1%x\nflush ruleset", "172.30.0.%[2]d", "fd00:172:30::%[2]x", "192.0.2.1", "2001:db8:2::1",
		"::ffff:192.0.2.1", "192.168.0.2", "fd00:1::2", "", " 198.51.100.2", "0.0.0.0", "::", "127.0.0.1",
		"::ffff:0:0", "1.2.3", "2001:db8::%[1]x:0:1", "192.168.0.3", "fd00:1::3", "::ffff:192.168.0.3",
	}
	sourceRanges = []string{
		"203.0.113.0/24", "203.0.113.128/25", "203.0.113.5/32", " 203.0.113.0/24 ", "203.000.113.000/24",
		"::ffff:203.0.113.0/120", "::ffff:10.0.0.0/104", "::ffff:0:0/96", "::ffff:0:0/95", "0.0.0.0/0", "::/0",
		"2001:db8::/32", "2001:db8:1::/48", "2001:db8::5/128", "192.168.0.0/16", "fd00:1::/64", "10.0.0.0/33",
		"fd00::/129", "garbage", "", "10.0.0.1%eth0/32", "fe80::%eth0/64", "192.0.2.1/32", "2001:db8:2::1/128",
	}
	endpointIPs = []string{
		"10.0.1.%[1]d", "10.0.2.%[1]d", "010.000.001.%03[1]d", "::ffff:10.0.1.%[1]d", "fd00:10::1:%[1]x",
		"fd00:10::2:%[1]x", "fe80::1%eth0", "10.0.1.%[1]d%%eth0", "10.0.1.%[1]d\n", "", "nope", "10.0.1.1",
		"fd00:10::1:1", "0.0.0.0", "::", "127.0.0.1", "224.0.0.%[1]d", "239.1.2.%[1]d", "255.255.255.255",
		"169.254.1.%[1]d", "::1", "ff02::%[1]x", "fe80::%[1]x", "::ffff:127.0.0.1",
	}
	protocols  = []string{"TCP", "UDP", "SCTP", "", "ICMP", "tcp"}
	portNames  = []string{"", "http", "p%[1]d", "a-b-c-d-e-f-g-h", "dns", "http"}
	namespaces = []string{"ns", "default", strings.Repeat("n", 63), "0-0", "kube-system"}
	names      = []string{"svc%[1]d", strings.Repeat("s", 61) + "%02[1]d", "x%[1]d", "a-%[1]d-z", "web"}
)

// spell formats a dictionary entry for a Service in slot own, naming
// another Service's slot other.
func spell(format string, own, other int) string {
	if !strings.Contains(format, "]d") && !strings.Contains(format, "]x") {
		return format
	}
	return fmt.Sprintf(format, own, other)
}

// world is one batch of objects.
type world struct {
	services []*v1.Service
	slices   []*discoveryv1.EndpointSlice
}

// world builds up to 4 Services in slots 10.., each with its slices.
func (g *gen) world() world {
	var w world
	g.hugeUsed = false
	seen := map[string]bool{}
	for i := range 1 + g.n(4) {
		svc := g.service(i)
		// The same name in two namespaces is fine; twice in one is one
		// object, which an informer never delivers as two.
		for seen[svc.Namespace+"/"+svc.Name] {
			svc.Name += "-2"
		}
		seen[svc.Namespace+"/"+svc.Name] = true
		w.services = append(w.services, svc)
		for k := range g.n(3) {
			w.slices = append(w.slices, g.slice(svc, k))
		}
	}
	return w
}

func (g *gen) service(i int) *v1.Service {
	slot := 10 + i
	other := 10 + g.n(4)
	ns := g.pick(namespaces...)
	name := spell(g.pick(names...), i, i)
	return proxytest.MakeService(ns, name, func(svc *v1.Service) {
		// Two ages, from a choice already made (a byte of its own would
		// change what every seed builds): equal claims tie on age as
		// often as not, and then the name decides.
		svc.CreationTimestamp = metav1.NewTime(time.Unix(int64(1_700_000_000+60*(other%2)), 0))
		svc.Spec.Type = v1.ServiceType(g.pick("ClusterIP", "NodePort", "LoadBalancer", "ExternalName", "LoadBalancer"))
		for range 1 + g.n(2) {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, spell(g.pick(clusterIPs...), slot, other))
		}
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		for range g.n(4) {
			svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, spell(g.pick(frontendIPs...), slot, other))
		}
		for range g.n(4) {
			ing := v1.LoadBalancerIngress{IP: spell(g.pick(frontendIPs...), slot, other)}
			if g.n(4) == 0 {
				ing.IPMode = ptr.To(v1.LoadBalancerIPModeProxy)
			}
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
		}
		for range g.n(6) {
			svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges, g.pick(sourceRanges...))
		}
		g.policies(svc)
		g.ports(svc, slot)
	})
}

// policies sets traffic policies and affinity.
func (g *gen) policies(svc *v1.Service) {
	if g.yes() {
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = int32(g.pick32(0, 32000, -1, 70000))
	}
	if g.yes() {
		svc.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
	}
	if g.yes() {
		svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		if t := g.pick32(-1, 0, 1, 10800, 86400); t >= 0 {
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(t))}}
		}
	}
}

// huge decides (one time in eight, byte 7) for many ports or endpoints,
// once per world.
func (g *gen) huge() bool {
	if g.n(8) != 7 || g.hugeUsed {
		return false
	}
	g.hugeUsed = true
	return true
}

func (g *gen) pick32(from ...int) int { return from[g.n(len(from))] }

// ports adds a few ports, or (one time in eight, byte 7) many: node ports are
// unique per Service slot unless the bytes say otherwise.
func (g *gen) ports(svc *v1.Service, slot int) {
	count := g.n(4)
	if g.huge() {
		count = 16 + g.n(48)
	}
	for j := range count {
		p := v1.ServicePort{
			Name:     spell(g.pick(portNames...), j, j),
			Protocol: v1.Protocol(g.pick(protocols...)),
			Port:     int32(g.pick32(80, 443, 53, 0, 65535, 65536, -1, 8080, 1000+j)),
		}
		if svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer {
			p.NodePort = int32(g.pick32(30000+slot*100+j, 30000+slot*100+j, 0, 70000, 30000+slot*100))
		}
		p.TargetPort.IntVal = int32(8080 + j)
		svc.Spec.Ports = append(svc.Spec.Ports, p)
	}
}

// slice builds the k-th EndpointSlice of svc, ports named as the Service's
// (and some not), endpoints a few or (one time in eight, byte 7) many.
func (g *gen) slice(svc *v1.Service, k int) *discoveryv1.EndpointSlice {
	return proxytest.MakeEndpointSlice(svc.Namespace, svc.Name, k, func(sl *discoveryv1.EndpointSlice) {
		sl.AddressType = discoveryv1.AddressType(g.pick("IPv4", "IPv6", "FQDN", "IPv4", "IPv6"))
		for j, sp := range svc.Spec.Ports {
			if g.n(6) == 0 {
				continue
			}
			port := discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Protocol: ptr.To(sp.Protocol),
				Port: ptr.To(int32(g.pick32(8080+j, 8080, 0, 70000, 9000+j)))}
			sl.Ports = append(sl.Ports, port)
		}
		count := g.n(5)
		if g.huge() {
			count = 32 + g.n(96)
		}
		for e := range count {
			sl.Endpoints = append(sl.Endpoints, g.endpoint(1+e%250))
		}
	})
}

func (g *gen) endpoint(host int) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{spell(g.pick(endpointIPs...), host, host)}}
	switch g.n(4) {
	case 0:
		ep.NodeName = ptr.To(proxytest.NodeName)
	case 1:
		ep.NodeName = ptr.To(proxytest.OtherNodeName)
	}
	c := g.n(8)
	ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(c&1 == 0), Serving: ptr.To(c&2 == 0), Terminating: ptr.To(c&4 != 0)}
	if g.n(4) == 0 {
		ep.Zone = ptr.To(g.pick(proxytest.NodeZone, proxytest.OtherZone, ""))
		ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: g.pick(proxytest.NodeZone, proxytest.OtherZone)}}}
	}
	return ep
}
