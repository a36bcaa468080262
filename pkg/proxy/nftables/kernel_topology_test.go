package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
	"github.com/svcproxy/svcproxy/pkg/proxy/proxytest"
)

// The kernel test topology (addresses: see netnstest's addressing plan):
//
//	client (2 addresses: allowed, blocked) ─┐
//	                     fabric bridge ─────┼── node1 (runs the Proxier) ── pod-a, pod-b, pod-c
//	                                        └── node2 ── pod-r
//
// Every pod runs TCP, UDP and SCTP echo servers on port 8080 that answer
// with their name and the source address they saw.
type kernelEnv struct {
	node1, node2    *netnstest.Node
	pods            map[string]*netnstest.Pod
	client          *netnstest.NS
	allowed, denied [2]netip.Addr // [IPv4, IPv6]
}

const (
	podPort  = 8080
	svcPort  = 80
	testNS   = "kt"
	nodeName = "node1"
)

var protocols = []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}

// requireKernel fails (never skips): these are the only tests that prove the
// ruleset works in a real kernel, so their absence must be loud.
func requireKernel(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("nftables kernel tests need root (network namespaces, nft)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nftables kernel tests need the nft binary: %v", err)
	}
}

func newKernelEnv(t *testing.T) *kernelEnv {
	t.Helper()
	lab := netnstest.New(t)
	cluster, err := netnstest.NewCluster(lab, 2)
	if err != nil {
		t.Fatal(err)
	}
	env := &kernelEnv{node1: cluster.Nodes[0], node2: cluster.Nodes[1], pods: map[string]*netnstest.Pod{}}
	for _, p := range []struct {
		name string
		node *netnstest.Node
	}{{"pod-a", env.node1}, {"pod-b", env.node1}, {"pod-c", env.node1}, {"pod-r", env.node2}} {
		pod, err := p.node.AddPod(p.name)
		if err != nil {
			t.Fatal(err)
		}
		for _, proto := range protocols {
			if _, err := pod.NS.Serve(p.name, proto, podPort); err != nil {
				t.Fatal(err)
			}
		}
		env.pods[p.name] = pod
	}
	var ids [][2]netip.Addr
	env.client, ids, err = cluster.AddClient("client", env.node1, 2)
	if err != nil {
		t.Fatal(err)
	}
	env.allowed, env.denied = ids[0], ids[1]
	return env
}

// fam selects addresses of one family.
type fam struct {
	family proxy.IPFamily
	v6     bool
}

var families = []fam{{proxy.IPv4, false}, {proxy.IPv6, true}}

func (f fam) pick(pair [2]netip.Addr) netip.Addr {
	if f.v6 {
		return pair[1]
	}
	return pair[0]
}

func (f fam) clusterIP(n int) netip.Addr {
	return f.pick([2]netip.Addr{addr("172.30.0.%d", n), addr("fd00:30::%x", n)})
}
func (f fam) externalIP(n int) netip.Addr {
	return f.pick([2]netip.Addr{addr("198.18.100.%d", n), addr("fd00:18:100::%x", n)})
}
func (f fam) lbIP(n int) netip.Addr {
	return f.pick([2]netip.Addr{addr("198.18.200.%d", n), addr("fd00:18:200::%x", n)})
}

func addr(format string, n int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf(format, n)) }

// svcSpec describes one test Service; every Service is dual-stack and has
// one port per protocol (named tcp, udp, sctp) on port 80 → 8080.
type svcSpec struct {
	name      string
	ip        int   // host part of its cluster, external and LB IPs
	nodePort  int32 // 0: ClusterIP; else the TCP node port, UDP +1, SCTP +2
	external  bool
	lb        bool
	ranges    func(e *kernelEnv) []string
	affinity  int32
	etpLocal  bool
	itpLocal  bool
	endpoints []epSpec
}

type epSpec struct {
	pod         string
	terminating bool
}

func (e *kernelEnv) service(s svcSpec) *v1.Service {
	return proxytest.MakeService(testNS, s.name, func(svc *v1.Service) {
		for _, f := range families {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, f.clusterIP(s.ip).String())
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, v1.IPFamily(f.family))
			if s.external {
				svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, f.externalIP(s.ip).String())
			}
			if s.lb {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress,
					v1.LoadBalancerIngress{IP: f.lbIP(s.ip).String()})
			}
		}
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		for i, proto := range protocols {
			port := v1.ServicePort{Name: portName(proto), Protocol: v1.Protocol(proto), Port: svcPort}
			if s.nodePort != 0 {
				port.NodePort = s.nodePort + int32(i)
			}
			svc.Spec.Ports = append(svc.Spec.Ports, port)
		}
		switch {
		case s.lb:
			svc.Spec.Type = v1.ServiceTypeLoadBalancer
		case s.nodePort != 0:
			svc.Spec.Type = v1.ServiceTypeNodePort
		}
		if s.ranges != nil {
			svc.Spec.LoadBalancerSourceRanges = s.ranges(e)
		}
		if s.affinity > 0 {
			svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{
				ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &s.affinity}}
		}
		if s.etpLocal {
			svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			svc.Spec.HealthCheckNodePort = s.nodePort + 10
		}
		if s.itpLocal {
			local := v1.ServiceInternalTrafficPolicyLocal
			svc.Spec.InternalTrafficPolicy = &local
		}
	})
}

func portName(p proxy.Protocol) string {
	switch p {
	case proxy.UDP:
		return "udp"
	case proxy.SCTP:
		return "sctp"
	}
	return "tcp"
}

// slice returns the Service's EndpointSlice of family f.
func (e *kernelEnv) slice(f fam, s svcSpec) *discoveryv1.EndpointSlice {
	var ports []proxytest.SlicePort
	for _, proto := range protocols {
		ports = append(ports, proxytest.SlicePort{Name: portName(proto), Port: podPort, Protocol: v1.Protocol(proto)})
	}
	var eps []proxytest.EP
	for _, ep := range s.endpoints {
		pod := e.pods[ep.pod]
		x := proxytest.EP{IP: pod.IP(f.v6), Node: pod.Node.NS.Role}
		if ep.terminating {
			x = x.AsTerminating()
		}
		eps = append(eps, x)
	}
	sl := proxytest.Slice(testNS, s.name, ports, eps...)
	sl.AddressType = discoveryv1.AddressType(f.family) // also right when there are no endpoints
	sl.Name = s.name + "-" + string(f.family)
	return sl
}

// world turns Service and EndpointSlice objects into desired States the way
// the daemon does (model.Tracker → desired.Compute), so these tests cover
// the policy decisions too, not a hand-made State.
type world struct {
	env     *kernelEnv
	f       fam
	tracker *model.Tracker
	state   *desired.State
}

func (e *kernelEnv) newWorld(f fam) *world {
	return &world{env: e, f: f, tracker: model.NewTracker(f.family)}
}

// apply feeds specs (as new or updated objects) and returns the next State,
// incremental after the first.
func (w *world) apply(t *testing.T, specs ...svcSpec) *desired.State {
	t.Helper()
	for _, s := range specs {
		w.tracker.OnServiceUpdate(nil, w.env.service(s))
		w.tracker.OnEndpointSliceUpdate(nil, w.env.slice(w.f, s))
	}
	snap, changes := w.tracker.Commit()
	w.state = desired.Compute(w.state, snap, changes, w.env.desiredNode(), w.options())
	return w.state
}

func (e *kernelEnv) desiredNode() desired.Node {
	n := e.node1
	node := desired.Node{
		Name:     nodeName,
		IPs:      []netip.Addr{n.IPv4, n.IPv6},
		PodCIDRs: []netip.Prefix{n.PodsV4, n.PodsV6},
	}
	node.HostAddrs = append(node.HostAddrs, n.IPv4, n.IPv6)
	for _, p := range n.Pods {
		node.HostAddrs = append(node.HostAddrs, p.GatewayV4, p.GatewayV6)
	}
	return node
}

func (w *world) options() desired.Options {
	return desired.Options{
		Family:          w.f.family,
		MasqueradeBit:   14,
		DetectLocalMode: "ClusterCIDR",
		ClusterCIDRs:    []netip.Prefix{netnstest.ClusterCIDRv4, netnstest.ClusterCIDRv6},
	}
}

// newProxier creates and initializes a Proxier inside the node namespace.
func (e *kernelEnv) newProxier(t *testing.T, f fam) *nftables.Proxier {
	t.Helper()
	var p *nftables.Proxier
	err := e.node1.NS.Do(func() (err error) {
		if p, err = nftables.New(f.family); err != nil {
			return err
		}
		return p.Init(context.Background())
	})
	if err != nil {
		t.Fatalf("%s proxier: %v", f.family, err)
	}
	return p
}

// sync runs Sync inside the node namespace: knftables runs nft, which
// inherits the namespace of the calling thread.
func (e *kernelEnv) sync(t *testing.T, p *nftables.Proxier, st *desired.State) {
	t.Helper()
	if err := e.node1.NS.Do(func() error { return p.Sync(context.Background(), st) }); err != nil {
		t.Fatalf("sync: %v", err)
	}
}
