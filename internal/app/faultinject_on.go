//go:build faultinject

package app

import (
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/faultinject"
	"github.com/svcproxy/svcproxy/internal/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// withFaults, in the test build (-tags faultinject, test/e2e only), makes
// the backend refuse the rules of Services named faultinject.PoisonPrefix*.
func withFaults(p syncer.Proxier, mode config.Mode, family proxy.IPFamily) syncer.Proxier {
	return faultinject.Wrap(p, string(mode), family)
}
