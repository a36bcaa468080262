package hostile

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

type sysctls map[string]string

func (m sysctls) Get(name string) (string, error) { return m[name], nil }
func (m sysctls) Set(name, value string) error    { m[name] = value; return nil }

func newIPVS(family proxy.IPFamily) backend {
	links := map[string][]netip.Addr{}
	for _, f := range proxy.Families {
		w := proxytest.WorldOf(f)
		links["eth0"] = append(links["eth0"], w.NodeIP)
		links["eth1"] = append(links["eth1"], w.SecondHostIP)
		links["lo"] = append(links["lo"], w.Loopback)
	}
	vs, sets, link, ipt := kipvs.NewFake(), kipset.NewFake(), klink.NewFake(links), kiptables.NewFake()
	p := ipvs.NewWithClients(family, ipvs.Options{ReapInterval: -1},
		ipvs.Clients{IPVS: vs, IPSet: sets, Link: link, Iptables: ipt, Sysctl: sysctls{}})
	return backend{
		name: "ipvs",
		sync: func(st *desired.State) error { return p.Sync(ctx, st, proxytest.ModeOf(st)) },
		check: func(t reporter, st *desired.State) {
			t.Helper()
			checkIPVS(t, st.Family, vs, sets, link)
			checkRestores(t, "ipvs", st.Family, ipt)
		},
	}
}

// checkIPVS checks that every virtual and real server, every address on
// kube-ipvs0 and every ipset member is of family, in plain form. (The
// fake ipset already refuses members of the other family; it takes an
// IPv4-mapped address for IPv6, which this catches.) Nested hash:net
// members are not checked: ipset accepts them and matching is unaffected.
func checkIPVS(t reporter, family proxy.IPFamily, vs *kipvs.Fake, sets *kipset.Fake, link *klink.Fake) {
	t.Helper()
	services, _ := vs.ListServices()
	for _, s := range services {
		if err := checkAddr(family, s.Addr); err != nil {
			t.Errorf("ipvs %s: virtual server %s: %v", family, s.ServiceKey, err)
		}
		dests, _ := vs.ListDestinations(s.ServiceKey)
		for _, d := range dests {
			if err := checkAddr(family, d.Addr.Addr()); err != nil || d.Addr.Port() == 0 {
				t.Errorf("ipvs %s: %s real server %s: %v", family, s.ServiceKey, d.Addr, err)
			}
		}
	}
	addrs, _ := link.ListAddrs("kube-ipvs0")
	for _, a := range addrs {
		if err := checkAddr(family, a); err != nil {
			t.Errorf("ipvs %s: kube-ipvs0 address: %v", family, err)
		}
	}
	listed, _ := sets.ListSets()
	for _, set := range listed {
		n := set.Name
		entries, _ := sets.ListEntries(n)
		for _, e := range entries {
			for _, a := range []netip.Addr{e.IP, e.IP2, e.Net.Addr()} {
				if a.IsValid() {
					if err := checkAddr(family, a); err != nil {
						t.Errorf("ipvs %s: ipset %s member %s: %v", family, n, e, err)
					}
				}
			}
		}
	}
}
