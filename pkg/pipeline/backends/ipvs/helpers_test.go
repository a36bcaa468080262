package ipvs

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// fakes bundles the fake kernel a test Proxier programs.
type fakes struct {
	ipvs  *kipvs.Fake
	ipset *kipset.Fake
	link  *klink.Fake
	ipt   *kiptables.Fake
	sys   mapSysctl
	clock *fakeClock
}

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time       { return c.now }
func (c *fakeClock) Step(d time.Duration) { c.now = c.now.Add(d) }
func newFakeClock() *fakeClock            { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }
func (f *fakes) writes() int              { return f.ipvs.Writes() + f.ipset.Writes() + f.link.Writes() }
func (f *fakes) clients() Clients         { return f.clientsWith(nil) }
func (f *fakes) clientsWith(kv func() (string, error)) Clients {
	return Clients{IPVS: f.ipvs, IPSet: f.ipset, Link: f.link, Iptables: f.ipt, Sysctl: f.sys, KernelVersion: kv}
}

// newFakes returns an empty fake kernel whose host addresses are the
// standard world's (eth0: node IP, eth1: second address, lo).
func newFakes() *fakes {
	links := map[string][]netip.Addr{}
	for _, f := range proxy.Families {
		w := proxytest.WorldOf(f)
		links["eth0"] = append(links["eth0"], w.NodeIP)
		links["eth1"] = append(links["eth1"], w.SecondHostIP)
		links["lo"] = append(links["lo"], w.Loopback)
	}
	return &fakes{ipvs: kipvs.NewFake(), ipset: kipset.NewFake(), link: klink.NewFake(links),
		ipt: kiptables.NewFake(), sys: mapSysctl{}, clock: newFakeClock()}
}

// newProxier returns a Proxier over f without a background reaper.
func newProxier(f *fakes, family proxy.IPFamily, opts Options) *Proxier {
	opts.ReapInterval = -1
	opts.Now = f.clock.Now
	return NewWithClients(family, opts, f.clients())
}

func mustSync(t *testing.T, p *Proxier, st *desired.State) {
	t.Helper()
	if err := p.Sync(context.Background(), st, proxytest.ModeOf(st)); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

type mapSysctl map[string]string

func (m mapSysctl) Get(name string) (string, error) { return m[name], nil }
func (m mapSysctl) Set(name, value string) error    { m[name] = value; return nil }

// Builders for hand-made states of the standard world (IPv4 unless said).

var (
	w4   = proxytest.WorldOf(proxy.IPv4)
	mark = uint32(1 << proxytest.MasqueradeBit)
)

func baseState(family proxy.IPFamily, ports ...*desired.ServicePort) *desired.State {
	w := proxytest.WorldOf(family)
	st := &desired.State{
		Family:     family,
		NodeIPs:    []netip.Addr{w.NodeIP},
		NodePorts:  desired.NodePortAddrs{All: true, Bound: []netip.Addr{w.NodeIP, w.SecondHostIP}},
		Masquerade: desired.Masquerade{Mark: mark, Local: desired.LocalDetector{Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{w.ClusterCIDR}}},
		Services:   model.PortMap[*desired.ServicePort]{},
	}
	for _, sp := range ports {
		st.Services = st.Services.With(sp.Name, sp)
	}
	return st
}

func spName(name string) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns1", Name: name}, Port: "http", Protocol: proxy.TCP}
}

// svcPort is a TCP port 80 of cluster IP n with endpoints eps (port 8080).
func svcPort(name string, n int, eps ...netip.Addr) *desired.ServicePort {
	d := desired.Dispatch{}
	for _, ip := range eps {
		d.Endpoints = append(d.Endpoints, desired.Endpoint{IP: ip, Port: 8080})
	}
	return &desired.ServicePort{Name: spName(name), Protocol: proxy.TCP, Port: 80,
		ClusterIP: w4.ClusterIP(n), Internal: d, External: d, Cluster: d}
}

// changed returns a copy of st with the given ports replaced and marked
// changed (nil removes the port).
func changed(st *desired.State, ports map[proxy.ServicePortName]*desired.ServicePort) *desired.State {
	out := *st
	out.Services = model.PortMap[*desired.ServicePort]{}
	for k, v := range st.Services.All() {
		out.Services = out.Services.With(k, v)
	}
	out.Changed = map[proxy.ServicePortName]struct{}{}
	for k, v := range ports {
		out.Changed[k] = struct{}{}
		if v == nil {
			out.Services = out.Services.Without(k)
		} else {
			out.Services = out.Services.With(k, v)
		}
	}
	return &out
}

func vsKey(ip netip.Addr, port uint16) kipvs.ServiceKey {
	return kipvs.ServiceKey{Addr: ip, Protocol: kipvs.TCP, Port: port}
}

func dests(t *testing.T, f *fakes, k kipvs.ServiceKey) map[netip.AddrPort]int {
	t.Helper()
	_, ds, ok := f.ipvs.Service(k)
	if !ok {
		t.Fatalf("no virtual server %s", k)
	}
	out := map[netip.AddrPort]int{}
	for _, d := range ds {
		out[d.Addr] = d.Weight
	}
	return out
}
