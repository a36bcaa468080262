package model

// Test IP plan: services 172.30.0.0/16 and fd00:30::/64, pods 10.0.0.0/8 and
// fd00:10::/64, outside clients 203.0.113.0/24.

import (
	"flag"
	"io"
	"net/netip"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// makeService returns a ClusterIP Service 172.30.0.1 with one TCP port
// "http" 80, after applying tweak.
func makeService(ns, name string, tweak func(*v1.Service)) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  "172.30.0.1",
			ClusterIPs: []string{"172.30.0.1"},
			Ports:      []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
	if tweak != nil {
		tweak(svc)
	}
	return svc
}

// makeSlice returns an IPv4 EndpointSlice of Service svc with one TCP port
// "http" 8080 and the given ready endpoint addresses, after applying tweak.
func makeSlice(ns, name, svc string, addrs []string, tweak func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{
			Name: ptrTo("http"), Protocol: ptrTo(v1.ProtocolTCP), Port: ptrTo[int32](8080),
		}},
	}
	for _, a := range addrs {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	if tweak != nil {
		tweak(slice)
	}
	return slice
}

func spn(ns, name, port string, protocol proxy.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{
		ServiceName: proxy.ServiceName{Namespace: ns, Name: name}, Port: port, Protocol: protocol,
	}
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// endpointAddrs lists the address:port of each endpoint of port in snap.
func endpointAddrs(snap *Snapshot, port proxy.ServicePortName) []string {
	eps, _ := snap.Endpoints.Get(port)
	out := make([]string, 0, eps.Len())
	for _, ep := range eps.Addrs() {
		out = append(out, ep.AddrPort().String())
	}
	return out
}

func changedSet(names ...proxy.ServicePortName) map[proxy.ServicePortName]struct{} {
	out := make(map[proxy.ServicePortName]struct{}, len(names))
	for _, n := range names {
		out[n] = struct{}{}
	}
	return out
}

// checkSnapshot asserts the invariants every snapshot must hold.
func checkSnapshot(t *testing.T, snap *Snapshot) {
	t.Helper()
	n := 0
	for name, sp := range snap.Services.All() {
		n++
		if sp == nil || sp.Name != name {
			t.Fatalf("service %v stored under the wrong name or nil", name)
		}
		if len(sp.ClusterIPs) == 0 {
			t.Fatalf("service %v has no cluster IP", name)
		}
		for _, ip := range append(append(append([]netip.Addr{}, sp.ClusterIPs...), sp.ExternalIPs...), sp.LoadBalancerIPs...) {
			if !snap.Family.Contains(ip) {
				t.Fatalf("service %v has address %v outside family %s", name, ip, snap.Family)
			}
		}
	}
	if n != snap.Services.Len() {
		t.Fatalf("Services.Len() = %d, iterated %d", snap.Services.Len(), n)
	}
	n = 0
	for name, eps := range snap.Endpoints.All() {
		n++
		if eps.Len() == 0 || len(eps.Infos()) != eps.Len() {
			t.Fatalf("endpoints of %v stored empty, or their infos do not match: %d addresses, %d infos", name, eps.Len(), len(eps.Infos()))
		}
		addrs := eps.Addrs()
		for i, ep := range addrs {
			if !snap.Family.Contains(ep.IP) || ep.Port == 0 {
				t.Fatalf("endpoint %v of %v invalid for %s", ep.AddrPort(), name, snap.Family)
			}
			if i > 0 && addrs[i-1].Compare(ep) >= 0 {
				t.Fatalf("endpoints of %v not sorted or duplicated at %d", name, i)
			}
		}
	}
	if n != snap.Endpoints.Len() {
		t.Fatalf("Endpoints.Len() = %d, iterated %d", snap.Endpoints.Len(), n)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestMain silences klog: invalid-object tests and the fuzzer log on purpose.
func TestMain(m *testing.M) {
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	_ = flags.Set("logtostderr", "false")
	_ = flags.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}
