//go:build faultinject

package app

import (
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/faultinject"
)

// withFaults, in the test build (-tags faultinject, test/e2e only), makes
// the backend refuse the rules of Services named faultinject.PoisonPrefix*.
// The wrapper tells which ports the kernel holds (as it would corrupt
// them) and reads nothing back ahead of the first sync.
func withFaults(b syncer.Backend, mode proxy.Mode, family proxy.IPFamily) syncer.Backend {
	w := faultinject.Wrap(b.Proxier, mode, family)
	return syncer.Backend{Proxier: w, PortHolder: w}
}
