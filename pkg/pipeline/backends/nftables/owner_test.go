package nftables

import (
	"runtime"
	"testing"
	"weak"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestStoreKeepsNoOldServicePort: once a port is rendered again from a
// newer State, the store keeps nothing of the ServicePort it was first
// rendered from. The element tables know an owner by a name that lives as
// long as the owner; render's points into the State's ServicePort, which
// it would keep alive, with everything it holds, for the life of the
// port: a ServicePort per port whose endpoints ever changed.
func TestStoreKeepsNoOldServicePort(t *testing.T) {
	st := benchStateOf(20, uniqueEndpoint)
	p := NewWithInterface(proxy.IPv4, fakeKernel(newStrictFake(knftables.IPv4Family)))
	mustSync(t, p, st)
	name := anyService(t, st, 1)
	first := weak.Make(st.Service(name))
	for range 2 {
		st = withChange(st, name, func(*desired.ServicePort) {})
		mustSyncIn(t, p, st, proxy.PartialSync)
	}
	runtime.GC()
	runtime.GC()
	if first.Value() != nil {
		t.Errorf("the ServicePort %s was first rendered from is still alive after two partial syncs from newer States", name)
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(st)
}
