//go:build faultinject

package app

import (
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

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

// dsrLeaseTimesForTest, in the test build, takes the DSR Lease's renew
// period and duration from SVCPROXY_E2E_DSR_LEASE ("1s,3s"), so that the
// end-to-end suite sees a Lease expire within its convergence bound.
func dsrLeaseTimesForTest(logger klog.Logger) {
	v, ok := os.LookupEnv("SVCPROXY_E2E_DSR_LEASE")
	if !ok {
		return
	}
	r, d, _ := strings.Cut(v, ",")
	renew, err1 := time.ParseDuration(r)
	duration, err2 := time.ParseDuration(d)
	if err1 != nil || err2 != nil || renew <= 0 || duration < time.Second {
		logger.Error(nil, "Ignoring SVCPROXY_E2E_DSR_LEASE: want RENEW,DURATION (DURATION at least 1s)", "value", v)
		return
	}
	dsrRenewPeriod, dsrLeaseDuration = renew, duration
}
