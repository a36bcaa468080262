package ipvs

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// tracer follows a new connection through what the backend programmed into
// the fakes, in the kernel's order:
//
//	incoming: nat PREROUTING → (not local: forwarded, untouched)
//	          → filter INPUT → IPVS LOCAL_IN (virtual server: DNAT, or with no
//	          real server of weight > 0, ICMP port unreachable) → host socket
//	from host: nat OUTPUT → IPVS LOCAL_OUT → (local: lo → filter INPUT)
//	then nat POSTROUTING decides masquerade (mark or KUBE-LOOP-BACK).
type tracer struct {
	t     *testing.T
	f     *fakes
	state *desired.State
}

func (tr *tracer) trace(flow proxytest.Flow) proxytest.Result {
	dummy, _ := tr.f.link.ListAddrs(DummyLink)
	eval := &ruleEval{ipt: tr.f.ipt, sets: tr.f.ipset, local: append(proxytest.LocalAddrs(tr.state), dummy...)}
	pkt := &packet{src: flow.Source, dst: flow.Dest, proto: flow.Protocol, dport: flow.DestPort, inIface: flow.InInterface}
	entry := kiptables.ChainPrerouting
	if flow.FromHost {
		entry = kiptables.ChainOutput
	}
	out := tr.run(eval, kiptables.TableNAT, entry, pkt)
	if out == "DROP" || out == "REJECT" {
		return proxytest.Result{Verdict: proxytest.Verdict(out)}
	}
	local := slices.Contains(eval.local, flow.Dest)
	if flow.FromHost {
		if r, ok := tr.ipvs(eval, pkt); ok {
			return r
		}
	}
	if !local {
		return proxytest.Result{Verdict: proxytest.Accept}
	}
	if out := tr.run(eval, kiptables.TableFilter, kiptables.ChainInput, pkt); out == "DROP" || out == "REJECT" {
		return proxytest.Result{Verdict: proxytest.Verdict(out)}
	}
	if !flow.FromHost {
		if r, ok := tr.ipvs(eval, pkt); ok {
			return r
		}
	}
	return proxytest.Result{Verdict: proxytest.Accept}
}

// ipvs looks the packet up in the IPVS table. With no schedulable real
// server the kernel answers ICMP port unreachable (ip_vs_leave).
func (tr *tracer) ipvs(eval *ruleEval, pkt *packet) (proxytest.Result, bool) {
	k := kipvs.ServiceKey{Addr: pkt.dst, Protocol: ProtocolOf(pkt.proto), Port: pkt.dport}
	_, dests, ok := tr.f.ipvs.Service(k)
	if !ok {
		return proxytest.Result{}, false
	}
	r := proxytest.Result{Verdict: proxytest.DNAT}
	for _, d := range dests {
		if d.Weight == 0 {
			continue
		}
		r.Endpoints = append(r.Endpoints, d.Addr)
		after := *pkt
		after.dst, after.dport = d.Addr.Addr(), d.Addr.Port()
		if tr.run(eval, kiptables.TableNAT, kiptables.ChainPostrouting, &after) == "MASQUERADE" {
			r.Masquerade = true
		}
	}
	if len(r.Endpoints) == 0 {
		return proxytest.Result{Verdict: proxytest.Reject}, true
	}
	slices.SortFunc(r.Endpoints, netip.AddrPort.Compare)
	return r, true
}

func (tr *tracer) run(eval *ruleEval, table kiptables.Table, chain string, pkt *packet) outcome {
	tr.t.Helper()
	out, err := eval.chain(table, chain, pkt)
	if err != nil {
		tr.t.Fatalf("tracing: %v", err)
	}
	return out
}

// TestFlows runs the shared packet-flow table through what the backend
// programs, with IPVS mode's documented differences (see translate).
func TestFlows(t *testing.T) {
	synced := map[*desired.State]*fakes{}
	proxytest.RunFlows(t, func(t *testing.T, state *desired.State, flow proxytest.Flow) proxytest.Result {
		f := synced[state]
		if f == nil {
			f = newFakes()
			mustSync(t, newProxier(f, state.Family, Options{}), state)
			synced[state] = f
		}
		got := (&tracer{t: t, f: f, state: state}).trace(flow)
		// RunFlows compares with flow.Want; map IPVS's result back when it
		// is exactly the documented difference from the reference.
		if want := translate(state, flow, flow.Want); got.Equal(want) {
			return flow.Want
		}
		return got
	})
}
