//go:build !faultinject

package app

import (
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// withFaults returns b: release builds inject nothing (faultinject_on.go).
func withFaults(b syncer.Backend, _ proxy.Mode, _ proxy.IPFamily) syncer.Backend { return b }

// dsrLeaseTimesForTest keeps the DSR Lease's times: release builds take
// none from the environment (faultinject_on.go).
func dsrLeaseTimesForTest(klog.Logger) {}
