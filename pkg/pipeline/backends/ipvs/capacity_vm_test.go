//go:build ipvsvm

package ipvs_test

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// upstreamMaxElem is the capacity upstream kube-proxy gives its hash sets
// (its ipset package's default, the kernel's too).
const upstreamMaxElem = 65536

// TestVMAdoptedSetCapacity: a node that ran upstream kube-proxy in IPVS
// mode keeps its hash sets, created with maxelem 65536, and svcproxy adopts
// them. One LoadBalancer Service with 100 ports × 700
// loadBalancerSourceRanges needs 70,000 members of
// KUBE-LOAD-BALANCER-SOURCE-CIDR, and a later LB Service with source
// ranges needs more: the sync must program both (the set is resized while
// the iptables rules match on it), and clients inside the ranges reach
// both.
func TestVMAdoptedSetCapacity(t *testing.T) {
	e := newVMEnv(t)
	f := scenario.Families[0]
	const set = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
	run(t, e.node1.NS, "ipset", "create", set, "hash:ip,port,net", "family", "inet",
		"hashsize", "1024", "maxelem", strconv.Itoa(upstreamMaxElem))

	const ports, ranges = 100, 700
	w := &world{e: e, f: f, tracker: model.NewTracker(f.Family)}
	client := netip.PrefixFrom(e.clientIPs[0], 32).String()
	src := []string{client}
	for i := 1; i < ranges; i++ {
		src = append(src, fmt.Sprintf("100.64.%d.%d/32", i/250, i%250))
	}
	e.feedLB(w, "big", 50, ports, src)
	e.feedLB(w, "zz-later", 51, 1, []string{client, "100.127.0.0/16"})
	p, _ := e.newProxier(t, f, ipvs.Options{})
	e.sync(t, p, w.compute())

	header := run(t, e.node1.NS, "ipset", "list", "-t", set)
	t.Logf("%s", header)
	members, maxElem := headerInt(t, header, "Number of entries"), headerInt(t, header, "maxelem")
	if want := ports*ranges + 2; members != want || maxElem < members {
		t.Errorf("%s: %d members, maxelem %d; want %d members within maxelem", set, members, maxElem, want)
	}
	if sets := run(t, e.node1.NS, "ipset", "list", "-n"); strings.Contains(sets, "RESIZE") {
		t.Errorf("the resize left its temporary set:\n%s", sets)
	}
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(f.LBIP(50), 1000), netip.AddrPortFrom(f.LBIP(50), 1000+ports-1), netip.AddrPortFrom(f.LBIP(51), 1000),
	} {
		if ans, err := e.fromClient(f).Ask(proxy.TCP, dst); err != nil {
			t.Errorf("client inside the source ranges to %s: %v", dst, err)
		} else if ans.Server != "pod-a" {
			t.Errorf("%s answered by %s, want pod-a", dst, ans.Server)
		}
	}
}

// upstreamSets are the ipsets upstream kube-proxy's IPVS mode creates, with
// their types (its ipsetInfo), under their IPv4 names.
var upstreamSets = []struct{ name, typ string }{
	{"KUBE-LOOP-BACK", "hash:ip,port,ip"}, {"KUBE-CLUSTER-IP", "hash:ip,port"},
	{"KUBE-EXTERNAL-IP", "hash:ip,port"}, {"KUBE-EXTERNAL-IP-LOCAL", "hash:ip,port"},
	{"KUBE-LOAD-BALANCER", "hash:ip,port"}, {"KUBE-LOAD-BALANCER-LOCAL", "hash:ip,port"},
	{"KUBE-LOAD-BALANCER-FW", "hash:ip,port"}, {"KUBE-LOAD-BALANCER-SOURCE-IP", "hash:ip,port,ip"},
	{"KUBE-LOAD-BALANCER-SOURCE-CIDR", "hash:ip,port,net"},
	{"KUBE-NODE-PORT-TCP", "bitmap:port"}, {"KUBE-NODE-PORT-LOCAL-TCP", "bitmap:port"},
	{"KUBE-NODE-PORT-UDP", "bitmap:port"}, {"KUBE-NODE-PORT-LOCAL-UDP", "bitmap:port"},
	{"KUBE-NODE-PORT-SCTP-HASH", "hash:ip,port"}, {"KUBE-NODE-PORT-LOCAL-SCTP-HASH", "hash:ip,port"},
	{"KUBE-HEALTH-CHECK-NODE-PORT", "bitmap:port"}, {"KUBE-IPVS-IPS", "hash:ip"},
}

// upstreamCreate is the command upstream kube-proxy runs for one of its
// sets at every sync (ipset.createSet with -exist, its defaults), in f's
// family: upstream's name for an IPv6 set is "KUBE-6-" and the rest,
// truncated to 31 characters.
func upstreamCreate(f scenario.Fam, name, typ string) []string {
	family := "inet"
	if f.V6 {
		family, name = "inet6", "KUBE-6-"+strings.TrimPrefix(name, "KUBE-")
	}
	name = name[:min(len(name), 31)]
	if typ == "bitmap:port" {
		return []string{"create", name, typ, "range", "0-65535", "-exist"}
	}
	return []string{"create", name, typ, "family", family, "hashsize", "1024", "maxelem", strconv.Itoa(upstreamMaxElem), "-exist"}
}

// TestVMSetsAdoptableByUpstream: after svcproxy programmed a node in IPVS
// mode, upstream kube-proxy (a rollback) creates each of its sets with
// -exist at every sync, and the kernel accepts that only for a set created
// with the same parameters; a failure stops upstream's every sync. That
// holds for the sets svcproxy creates and for one an earlier svcproxy
// version created with maxelem 1048576 and this one adopts.
func TestVMSetsAdoptableByUpstream(t *testing.T) {
	e := newVMEnv(t)
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			earlier := upstreamCreate(f, "KUBE-CLUSTER-IP", "hash:ip,port")
			earlier[len(earlier)-2] = "1048576"
			run(t, e.node1.NS, "ipset", earlier[:len(earlier)-1]...)
			w := &world{e: e, f: f, tracker: model.NewTracker(f.Family)}
			p, _ := e.newProxier(t, f, ipvs.Options{})
			e.sync(t, p, w.apply(vmServices()...))
			for _, s := range upstreamSets {
				args := upstreamCreate(f, s.name, s.typ)
				if out, err := e.node1.NS.Run(context.Background(), "ipset", args...); err != nil {
					t.Errorf("upstream's ipset %s: %v: %s", strings.Join(args, " "), err, out)
				}
			}
			e.balances(t, f, f.ClusterIP(10))
			t.Run("Cleanup", func(t *testing.T) { e.cleanup(t, f, p) })
		})
	}
}

// feedLB gives w's tracker a LoadBalancer Service with n TCP ports
// (1000…, to pod-a's 8080) on slot's cluster and LB IPs, and ranges.
func (e *vmEnv) feedLB(w *world, name string, slot, n int, ranges []string) {
	svc := proxytest.MakeService(testNS, name, func(svc *v1.Service) {
		svc.Spec.Type = v1.ServiceTypeLoadBalancer // without node ports (allocateLoadBalancerNodePorts: false)
		svc.Spec.ClusterIP = w.f.ClusterIP(slot).String()
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: w.f.LBIP(slot).String()}}
		svc.Spec.LoadBalancerSourceRanges = ranges
		for i := range n {
			svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: v1.ProtocolTCP, Port: int32(1000 + i)})
		}
	})
	var ports []proxytest.SlicePort
	for i := range n {
		ports = append(ports, proxytest.SlicePort{Name: fmt.Sprintf("p%d", i), Port: podPort, Protocol: v1.ProtocolTCP})
	}
	pod := e.pods["pod-a"]
	w.tracker.OnServiceUpdate(nil, svc)
	w.tracker.OnEndpointSliceUpdate(nil, proxytest.Slice(testNS, name, ports, proxytest.EP{IP: pod.IP(w.f.V6), Node: pod.Node.NS.Role}))
}

// headerInt reads "key: N" (or "key N" inside the Header line) from ipset
// list -t output.
func headerInt(t *testing.T, out, key string) int {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(key) + `:? (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in:\n%s", key, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
