package nftables

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// An eTP=Local service whose cluster-wide endpoint count changes moves to
// another entry chain and another cluster-N chain; the old pair goes in the
// same transaction, the entry chain still jumping to cluster-N until it is
// flushed. The strict fake refuses deleting a referenced chain, as the
// kernel does (EBUSY) — found by the e2e suite.
func TestExternalLocalEndpointCountChange(t *testing.T) {
	for _, family := range proxy.Families {
		st := caseState(t, "externalTrafficPolicy Local with a local endpoint", family)
		fake := newStrictFake(specFor(family).family)
		p := NewWithInterface(family, fakeKernel(fake))
		mustSync(t, p, st)
		var name proxy.ServicePortName
		for n, sp := range st.Services.All() {
			if sp.ExternalLocal && len(sp.Cluster.Endpoints) > 0 {
				name = n
			}
		}
		if name == (proxy.ServicePortName{}) {
			t.Fatalf("%s: case has no eTP=Local port with endpoints", family)
		}
		grown := withChange(st, name, func(sp *desired.ServicePort) {
			extra := desired.Endpoint{IP: otherAddr(sp.Cluster.Endpoints[0].IP), Port: sp.Cluster.Endpoints[0].Port}
			sp.Cluster.Endpoints = append(append([]desired.Endpoint{}, sp.Cluster.Endpoints...), extra)
		})
		mustSync(t, p, grown)
		mustSync(t, p, withChange(grown, name, func(sp *desired.ServicePort) { *sp = *st.Service(name) }))
		restarted := NewWithInterface(family, fakeKernel(fake))
		if s := mustSync(t, restarted, st); s.Operations != 0 {
			t.Errorf("%s: after growing and shrinking back, a restart still sent %d operations", family, s.Operations)
		}
	}
}

// otherAddr returns an address next to a, of the same family, for an extra
// endpoint.
func otherAddr(a netip.Addr) netip.Addr {
	for i := 0; i < 200; i++ {
		a = a.Next()
	}
	return a
}
