// Package scenario is the shared real-kernel test scenario for dataplane
// backends: a two-node namespace cluster with pods and an outside client
// (built with netnstest), a fixed set of test Services turned into desired
// States the way the daemon does it (model.Tracker → desired.Compute), and
// the connection checks every backend must pass (TCP, UDP and SCTP through
// cluster IPs, node ports, external and LB IPs; source ranges, affinity,
// traffic policies, reject, hairpin, terminating endpoints, endpoint
// removal, a connection kept across a restart).
//
// A backend's kernel test builds an Env, programs node1 through its own
// Proxier (inside Node1.NS), and runs the checks; only backend-specific
// assertions (restart rewrites, cleanup) stay in the backend's test. A
// mode whose socket hooks translate at connect (ebpf) puts node1's pods in
// its cgroup (PodsInCgroup): the checks then also ask from a pod, and
// expect what translation does instead of the rules (translated.go).
package scenario

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// Env is the topology (addresses: see netnstest's addressing plan):
//
//	client (2 addresses: allowed, blocked) ─┐
//	                     fabric bridge ─────┼── node1 (runs the Proxier) ── pod-a, pod-b, pod-c
//	                                        └── node2 ── pod-r
//
// Every pod runs TCP, UDP and SCTP echo servers on port 8080 that answer
// with their name and the source address they saw.
type Env struct {
	Node1, Node2    *netnstest.Node
	Pods            map[string]*netnstest.Pod
	Client          *netnstest.NS
	Allowed, Denied [2]netip.Addr // [IPv4, IPv6]

	// podCgroup, if set, is where node1's pods' clients run (PodsInCgroup).
	podCgroup string
}

// Ports and names every scenario Service uses.
const (
	PodPort   = 8080
	SvcPort   = 80
	Namespace = "kt"
	NodeName  = "node1"
)

// Protocols are the protocols every scenario Service has a port for.
var Protocols = []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}

// NewEnv builds the topology in a fresh Lab that t's cleanup removes.
func NewEnv(t *testing.T) *Env {
	t.Helper()
	lab := netnstest.New(t)
	cluster, err := netnstest.NewCluster(lab, 2)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Node1: cluster.Nodes[0], Node2: cluster.Nodes[1], Pods: map[string]*netnstest.Pod{}}
	for _, p := range []struct {
		name string
		node *netnstest.Node
	}{{"pod-a", env.Node1}, {"pod-b", env.Node1}, {"pod-c", env.Node1}, {"pod-r", env.Node2}} {
		pod, err := p.node.AddPod(p.name)
		if err != nil {
			t.Fatal(err)
		}
		for _, proto := range Protocols {
			if _, err := pod.NS.Serve(p.name, proto, PodPort); err != nil {
				t.Fatal(err)
			}
		}
		env.Pods[p.name] = pod
	}
	var ids [][2]netip.Addr
	env.Client, ids, err = cluster.AddClient("client", env.Node1, 2)
	if err != nil {
		t.Fatal(err)
	}
	env.Allowed, env.Denied = ids[0], ids[1]
	return env
}

// Fam selects the addresses of one IP family.
type Fam struct {
	Family proxy.IPFamily
	V6     bool
}

// Families are both families, IPv4 first.
var Families = []Fam{{proxy.IPv4, false}, {proxy.IPv6, true}}

// Pick returns the member of an [IPv4, IPv6] pair of this family.
func (f Fam) Pick(pair [2]netip.Addr) netip.Addr {
	if f.V6 {
		return pair[1]
	}
	return pair[0]
}

// ClusterIP, ExternalIP and LBIP are the addresses of scenario slot n.
func (f Fam) ClusterIP(n int) netip.Addr {
	return f.Pick([2]netip.Addr{addr("172.30.0.%d", n), addr("fd00:30::%x", n)})
}

// ExternalIP is slot n's external IP.
func (f Fam) ExternalIP(n int) netip.Addr {
	return f.Pick([2]netip.Addr{addr("198.18.100.%d", n), addr("fd00:18:100::%x", n)})
}

// LBIP is slot n's load-balancer IP.
func (f Fam) LBIP(n int) netip.Addr {
	return f.Pick([2]netip.Addr{addr("198.18.200.%d", n), addr("fd00:18:200::%x", n)})
}

func addr(format string, n int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf(format, n)) }

// FromClient is the outside client on its allowed address.
func (e *Env) FromClient(f Fam) netnstest.Client {
	return netnstest.Client{NS: e.Client, Source: f.Pick(e.Allowed)}
}

// FromPod is a client inside the named pod.
func (e *Env) FromPod(name string) netnstest.Client {
	c := netnstest.Client{NS: e.Pods[name].NS}
	if e.Translated(name) {
		c.Cgroup = e.podCgroup
	}
	return c
}

// PodsInCgroup makes the clients of node1's pods run in cgroup, a cgroup
// v2 directory the test created where ebpf mode's socket hooks are
// attached, as a kubelet puts a node's pods under the cgroup the hooks
// see. Their connections are then translated at connect, and the checks
// expect what a connect-time dataplane does (Translated). The test binary's
// TestMain must call netnstest.ServeChild.
func (e *Env) PodsInCgroup(cgroup string) { e.podCgroup = cgroup }

// Translated reports whether the named pod's connections are translated
// at connect (PodsInCgroup): they leave the pod already addressed to the
// endpoint, so nothing on the way rewrites them, not even to masquerade a
// connection that comes back to the pod itself.
func (e *Env) Translated(pod string) bool {
	return e.podCgroup != "" && e.Pods[pod].Node == e.Node1
}
