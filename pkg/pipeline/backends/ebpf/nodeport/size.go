package nodeport

import (
	"os"
	"path/filepath"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ExpectSize tells the size family's first State is expected to have (the
// list-size hint, syncer.Sizer). The maps are created at the first
// family's first sync, before the other family's State is known: with its
// expected size, that family's maps are created at about its size rather
// than the least, and its first sync need not grow them.
func (p *Proxier) ExpectSize(family proxy.IPFamily, size proxy.ExpectedSize) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.expected == nil {
		p.expected = map[proxy.IPFamily]proxy.ExpectedSize{}
	}
	p.expected[family] = size
}

// CreatesMaps reports whether the next load creates the maps, so that an
// expected size would matter: nothing is loaded and no map is pinned (a
// pinned map is adopted at its own size).
func (p *Proxier) CreatesMaps() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kernel != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(p.o.PinDir, mapServices))
	return err != nil
}

// expectedSizes are the capacities for a State of the expected size,
// which counts service ports with a cluster IP and endpoint-port pairs:
// one frontend and one Maglev table per service port (a node port on
// several addresses, external and LB IPs make more, and the capacity
// leaves room for twice as many), a slot per endpoint port, and the
// conntrack table for each endpoint as a State's would be. Source ranges
// and affinity members are left the least: few States have many.
func expectedSizes(e proxy.ExpectedSize, floor int) sizes {
	return sizesOf(floor, e.ServicePorts, e.EndpointPorts, e.ServicePorts, 0, 0, e.EndpointPorts)
}
