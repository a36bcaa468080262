//go:build ipvsvm

package ipvs_test

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// counting wraps the real kernel clients and counts the writes that
// changed the kernel (a create refused with "exists" changes nothing) and
// all write attempts.
type counting struct {
	writes, attempts atomic.Int64
}

func (c *counting) count(err error) error {
	c.attempts.Add(1)
	if err == nil {
		c.writes.Add(1)
	}
	return err
}

type countIPVS struct {
	kipvs.Interface
	n *counting
}

func (c countIPVS) AddService(s kipvs.Service) error { return c.n.count(c.Interface.AddService(s)) }
func (c countIPVS) UpdateService(s kipvs.Service) error {
	return c.n.count(c.Interface.UpdateService(s))
}
func (c countIPVS) DeleteService(k kipvs.ServiceKey) error {
	return c.n.count(c.Interface.DeleteService(k))
}
func (c countIPVS) AddDestination(k kipvs.ServiceKey, d kipvs.Destination) error {
	return c.n.count(c.Interface.AddDestination(k, d))
}
func (c countIPVS) UpdateDestination(k kipvs.ServiceKey, d kipvs.Destination) error {
	return c.n.count(c.Interface.UpdateDestination(k, d))
}
func (c countIPVS) DeleteDestination(k kipvs.ServiceKey, a netip.AddrPort) error {
	return c.n.count(c.Interface.DeleteDestination(k, a))
}

type countSet struct {
	kipset.Interface
	n *counting
}

func (c countSet) CreateSet(s kipset.Set) error { return c.n.count(c.Interface.CreateSet(s)) }
func (c countSet) DestroySet(n string) error    { return c.n.count(c.Interface.DestroySet(n)) }
func (c countSet) AddEntry(n string, e kipset.Entry) error {
	return c.n.count(c.Interface.AddEntry(n, e))
}
func (c countSet) DelEntry(n string, e kipset.Entry) error {
	return c.n.count(c.Interface.DelEntry(n, e))
}

type countLink struct {
	klink.Interface
	n *counting
}

func (c countLink) AddAddr(l string, a netip.Addr) error { return c.n.count(c.Interface.AddAddr(l, a)) }
func (c countLink) DelAddr(l string, a netip.Addr) error { return c.n.count(c.Interface.DelAddr(l, a)) }
func (c countLink) DeleteLink(l string) error            { return c.n.count(c.Interface.DeleteLink(l)) }

// newProxier makes a Proxier over the real clients of node1 (wrapped to
// count writes) and runs Init there. ReapInterval<0: the test calls Reap.
func (e *vmEnv) newProxier(t *testing.T, f scenario.Fam, opts ipvs.Options) (*ipvs.Proxier, *counting) {
	t.Helper()
	cnt := &counting{}
	var p *ipvs.Proxier
	err := e.node1.NS.Do(func() error {
		iv, err := kipvs.New("")
		if err != nil {
			return err
		}
		is, err := kipset.New("")
		if err != nil {
			return err
		}
		lk, err := klink.New("")
		if err != nil {
			return err
		}
		ipt, err := kiptables.New(f.Family, kiptables.DetectFlavour(context.Background()))
		if err != nil {
			return err
		}
		t.Cleanup(func() { iv.Close(); is.Close(); lk.Close() })
		opts.ReapInterval = -1
		p = ipvs.NewWithClients(f.Family, opts, ipvs.Clients{
			IPVS: countIPVS{iv, cnt}, IPSet: countSet{is, cnt}, Link: countLink{lk, cnt},
			Iptables: ipt, Sysctl: ipvs.ProcSysctl{},
		})
		return p.Init(context.Background())
	})
	if err != nil {
		t.Fatalf("%s proxier: %v", f.Family, err)
	}
	t.Cleanup(p.Close)
	return p, cnt
}

func (e *vmEnv) sync(t *testing.T, p *ipvs.Proxier, st *desired.State) {
	t.Helper()
	e.syncIn(t, p, st, proxytest.ModeOf(st))
}

// syncIn syncs st in mode: a new Proxier's first sync is a RecoverySync,
// as the syncer makes it.
func (e *vmEnv) syncIn(t *testing.T, p *ipvs.Proxier, st *desired.State, mode proxy.SyncMode) {
	t.Helper()
	start := time.Now()
	if err := e.node1.NS.Do(func() error { return p.Sync(context.Background(), st, mode) }); err != nil {
		t.Fatalf("sync: %v", err)
	}
	t.Logf("sync of %d service ports took %v", st.Services.Len(), time.Since(start))
}
