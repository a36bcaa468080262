package scenario

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// Spec describes one test Service; every Service is dual-stack and has one
// port per protocol (named tcp, udp, sctp) on port 80 → 8080.
type Spec struct {
	Name     string
	Slot     int   // host part of its cluster, external and LB IPs
	NodePort int32 // 0: ClusterIP; else the TCP node port, UDP +1, SCTP +2
	External bool
	// MoreExternal are more external IPs: ExternalIP of each slot.
	MoreExternal []int
	LB           bool
	Ranges       func(e *Env) []string
	Affinity     int32
	ETPLocal     bool
	ITPLocal     bool
	Endpoints    []EPSpec
	// Tweak and TweakSlice, if set, edit the objects last (hostile input).
	Tweak      func(svc *v1.Service)
	TweakSlice func(f Fam, sl *discoveryv1.EndpointSlice)
}

// EPSpec is one endpoint: a pod, possibly terminating (still serving).
type EPSpec struct {
	Pod         string
	Terminating bool
}

// Services are the Services every family gets; the checks rely on them.
func (e *Env) Services() []Spec {
	all := []EPSpec{{Pod: "pod-a"}, {Pod: "pod-b"}, {Pod: "pod-c"}, {Pod: "pod-r"}}
	local3 := []EPSpec{{Pod: "pod-a"}, {Pod: "pod-b"}, {Pod: "pod-c"}}
	return []Spec{
		{Name: "spread", Slot: 10, NodePort: 30010, External: true, LB: true, Endpoints: all},
		{Name: "ranges", Slot: 11, NodePort: 30020, LB: true, Endpoints: []EPSpec{{Pod: "pod-a"}},
			Ranges: func(e *Env) []string {
				return []string{netip.PrefixFrom(e.Allowed[0], 32).String(), netip.PrefixFrom(e.Allowed[1], 128).String()}
			}},
		{Name: "sticky", Slot: 12, Endpoints: local3, Affinity: 10800},
		{Name: "sticky-short", Slot: 13, Endpoints: local3, Affinity: 1},
		{Name: "etp-local", Slot: 14, NodePort: 30030, ETPLocal: true, Endpoints: []EPSpec{{Pod: "pod-a"}, {Pod: "pod-r"}}},
		{Name: "etp-local-none", Slot: 15, NodePort: 30040, ETPLocal: true, Endpoints: []EPSpec{{Pod: "pod-r"}}},
		{Name: "itp-local", Slot: 16, ITPLocal: true, Endpoints: []EPSpec{{Pod: "pod-a"}, {Pod: "pod-r"}}},
		{Name: "itp-local-none", Slot: 17, ITPLocal: true, Endpoints: []EPSpec{{Pod: "pod-r"}}},
		{Name: "no-endpoints", Slot: 18, NodePort: 30050},
		{Name: "hairpin", Slot: 19, Endpoints: []EPSpec{{Pod: "pod-a"}}},
		{Name: "terminating", Slot: 20, Endpoints: []EPSpec{{Pod: "pod-b", Terminating: true}}},
		{Name: "terminating-mixed", Slot: 21, Endpoints: []EPSpec{{Pod: "pod-b", Terminating: true}, {Pod: "pod-c"}}},
		{Name: "churn", Slot: 22, Endpoints: local3},
	}
}

// ServiceNamed returns the scenario Service called name.
func (e *Env) ServiceNamed(t *testing.T, name string) Spec {
	t.Helper()
	for _, s := range e.Services() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no test service %q", name)
	return Spec{}
}

func (e *Env) service(s Spec) *v1.Service {
	return proxytest.MakeService(Namespace, s.Name, func(svc *v1.Service) {
		for _, f := range Families {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, f.ClusterIP(s.Slot).String())
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, v1.IPFamily(f.Family))
			if s.External {
				svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, f.ExternalIP(s.Slot).String())
			}
			for _, n := range s.MoreExternal {
				svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, f.ExternalIP(n).String())
			}
			if s.LB {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress,
					v1.LoadBalancerIngress{IP: f.LBIP(s.Slot).String()})
			}
		}
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		for i, proto := range Protocols {
			port := v1.ServicePort{Name: PortName(proto), Protocol: v1.Protocol(proto), Port: SvcPort}
			if s.NodePort != 0 {
				port.NodePort = s.NodePort + int32(i)
			}
			svc.Spec.Ports = append(svc.Spec.Ports, port)
		}
		switch {
		case s.LB:
			svc.Spec.Type = v1.ServiceTypeLoadBalancer
		case s.NodePort != 0:
			svc.Spec.Type = v1.ServiceTypeNodePort
		}
		if s.Ranges != nil {
			svc.Spec.LoadBalancerSourceRanges = s.Ranges(e)
		}
		if s.Affinity > 0 {
			svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{
				ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &s.Affinity}}
		}
		if s.ETPLocal {
			svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			svc.Spec.HealthCheckNodePort = s.NodePort + 10
		}
		if s.ITPLocal {
			local := v1.ServiceInternalTrafficPolicyLocal
			svc.Spec.InternalTrafficPolicy = &local
		}
		if s.Tweak != nil {
			s.Tweak(svc)
		}
	})
}

// PortName is the scenario's port name for proto.
func PortName(p proxy.Protocol) string {
	switch p {
	case proxy.UDP:
		return "udp"
	case proxy.SCTP:
		return "sctp"
	}
	return "tcp"
}

// slice returns the Service's EndpointSlice of family f.
func (e *Env) slice(f Fam, s Spec) *discoveryv1.EndpointSlice {
	var ports []proxytest.SlicePort
	for _, proto := range Protocols {
		ports = append(ports, proxytest.SlicePort{Name: PortName(proto), Port: PodPort, Protocol: v1.Protocol(proto)})
	}
	var eps []proxytest.EP
	for _, ep := range s.Endpoints {
		pod := e.Pods[ep.Pod]
		x := proxytest.EP{IP: pod.IP(f.V6), Node: pod.Node.NS.Role}
		if ep.Terminating {
			x = x.AsTerminating()
		}
		eps = append(eps, x)
	}
	sl := proxytest.Slice(Namespace, s.Name, ports, eps...)
	sl.AddressType = discoveryv1.AddressType(f.Family) // also right when there are no endpoints
	sl.Name = s.Name + "-" + string(f.Family)
	if s.TweakSlice != nil {
		s.TweakSlice(f, sl)
	}
	return sl
}

// World turns Service and EndpointSlice objects into desired States the way
// the daemon does (model.Tracker → desired.Compute), so kernel tests cover
// the policy decisions too, not a hand-made State.
type World struct {
	env     *Env
	f       Fam
	tracker *model.Tracker
	state   *desired.State
	// configure edits the Compute options (Configure).
	configure func(*desired.Options)
}

// NewWorld starts an empty world of family f.
func (e *Env) NewWorld(f Fam) *World {
	return &World{env: e, f: f, tracker: model.NewTracker(f.Family)}
}

// Configure makes every later Apply compute with edit applied to the
// options: a mode's configuration, such as iptables' localhostNodePorts.
func (w *World) Configure(edit func(*desired.Options)) *World {
	w.configure = edit
	return w
}

// State is the last State Apply returned.
func (w *World) State() *desired.State { return w.state }

// Feed gives the world's tracker specs as new or updated objects without
// computing a State: for tests that run the daemon's own sync loop
// (pkg/pipeline/syncer) over Tracker, Node and Options.
func (w *World) Feed(specs ...Spec) {
	for _, s := range specs {
		w.tracker.OnServiceUpdate(nil, w.env.service(s))
		w.tracker.OnEndpointSliceUpdate(nil, w.env.slice(w.f, s))
	}
}

// Tracker is the world's change tracker, marked synced.
func (w *World) Tracker() *model.Tracker {
	w.tracker.OnServicesSynced()
	w.tracker.OnEndpointSlicesSynced()
	return w.tracker
}

// Node is node1 as Compute sees it; Options are the Compute options.
func (w *World) Node() desired.Node       { return w.env.desiredNode() }
func (w *World) Options() desired.Options { return w.options() }

// Apply feeds specs (as new or updated objects) and returns the next State,
// incremental (Changed set) after the first.
func (w *World) Apply(t *testing.T, specs ...Spec) *desired.State {
	t.Helper()
	for _, s := range specs {
		w.tracker.OnServiceUpdate(nil, w.env.service(s))
		w.tracker.OnEndpointSliceUpdate(nil, w.env.slice(w.f, s))
	}
	snap, changes := w.tracker.Commit()
	w.state = desired.Compute(w.state, snap, changes, w.env.desiredNode(), w.options())
	return w.state
}

func (e *Env) desiredNode() desired.Node {
	n := e.Node1
	node := desired.Node{
		Name:     NodeName,
		IPs:      []netip.Addr{n.IPv4, n.IPv6},
		PodCIDRs: []netip.Prefix{n.PodsV4, n.PodsV6},
	}
	node.HostAddrs = append(node.HostAddrs, n.IPv4, n.IPv6)
	for _, p := range n.Pods {
		node.HostAddrs = append(node.HostAddrs, p.GatewayV4, p.GatewayV6)
	}
	return node
}

func (w *World) options() desired.Options {
	o := desired.Options{
		Family:          w.f.Family,
		MasqueradeBit:   14,
		DetectLocalMode: "ClusterCIDR",
		ClusterCIDRs:    []netip.Prefix{netnstest.ClusterCIDRv4, netnstest.ClusterCIDRv6},
	}
	if w.configure != nil {
		w.configure(&o)
	}
	return o
}
