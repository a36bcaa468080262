package ebpf

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// mapTracer answers a flow from real kernel maps, programmed by a store
// with the flow's State: the lookups the hooks make, in Go.
type mapTracer struct {
	services, backends *ebpf.Map
}

func newMapTracer(t *testing.T, st *desired.State) *mapTracer {
	spec, err := loadSock()
	must(t, err)
	mt := &mapTracer{}
	for name, m := range map[string]**ebpf.Map{mapServices: &mt.services, mapBackends: &mt.backends} {
		ms := spec.Maps[name].Copy()
		ms.MaxEntries = minCapacity
		*m, err = ebpf.NewMap(ms)
		must(t, err)
		t.Cleanup(func() { (*m).Close() })
	}
	syncStore(t, newStore(), tables{
		services: kernelTable[svcKey, svcVal]{mt.services},
		backends: kernelTable[beKey, beVal]{mt.backends},
	}, st, proxy.FullSync)
	return mt
}

// trace returns the fate of a new connection to the flow's destination:
// every endpoint the hook may pick, or the refusal. A socket's source is
// never translated.
func (mt *mapTracer) trace(t *testing.T, flow proxytest.Flow) proxytest.Result {
	var v svcVal
	err := mt.services.Lookup(frontendKey(flow.Dest, flow.DestPort, protoNumbers[flow.Protocol]), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		err = mt.services.Lookup(anyPort(flow.Dest), &v)
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return proxytest.Result{Verdict: proxytest.Accept}
	}
	must(t, err)
	tg := v.Pod
	if flow.FromHost {
		tg = v.Node
	}
	if tg.Count == 0 {
		if tg.Flags&flagDrop != 0 {
			return proxytest.Result{Verdict: proxytest.Drop}
		}
		return proxytest.Result{Verdict: proxytest.Reject}
	}
	r := proxytest.Result{Verdict: proxytest.DNAT}
	for s := range tg.Count {
		var be beVal
		must(t, mt.backends.Lookup(beKey{ID: tg.ID, Slot: s}, &be))
		r.Endpoints = append(r.Endpoints, be.AddrPort())
	}
	slices.SortFunc(r.Endpoints, netip.AddrPort.Compare)
	return r
}

// seenBySockets reports whether a flow starts at a socket on this node (the
// node itself or a pod of this node): the only flows the hooks see.
func seenBySockets(flow proxytest.Flow) bool {
	return flow.FromHost || proxytest.WorldOf(proxy.FamilyOf(flow.Dest)).LocalPodCIDR.Contains(flow.Source)
}

// rangedLB reports whether a flow addresses an LB IP with source ranges,
// which the hooks leave to the packet path: they run before the socket has
// a source address to check. Render leaves them out, which the test of
// Render checks.
func rangedLB(st *desired.State, flow proxytest.Flow) bool {
	for _, sp := range st.Services.All() {
		if sp.AllowedSources != nil && slices.Contains(sp.LoadBalancerIPs, flow.Dest) {
			return true
		}
	}
	return false
}

// TestFlowsOverRealMaps runs the shared flow cases that start at a socket
// on the node against real maps.
func TestFlowsOverRealMaps(t *testing.T) {
	netnstest.RequireKernel(t)
	traced, skipped := 0, 0
	for _, c := range proxytest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			for _, family := range proxy.Families {
				var mt *mapTracer
				var st *desired.State
				for _, flow := range c.Flows {
					if !family.Contains(flow.Dest) {
						continue
					}
					if !seenBySockets(flow) {
						skipped++
						continue
					}
					if mt == nil {
						st = proxytest.BuildState(t, c, family)
						mt = newMapTracer(t, st)
					}
					if rangedLB(st, flow) {
						skipped++
						continue
					}
					traced++
					want := flow.Want
					want.Masquerade = false
					if got := mt.trace(t, flow); !got.Equal(want) {
						t.Errorf("flow %q (%s %s -> %s:%d): got %s, want %s",
							flow.Name, flow.Protocol, flow.Source, flow.Dest, flow.DestPort, got, want)
					}
				}
			}
		})
	}
	t.Logf("%d flows from sockets on the node traced over real maps; %d left to the packet path (from elsewhere, or to an LB IP with source ranges)", traced, skipped)
	if traced == 0 {
		t.Error("no flow traced")
	}
}
