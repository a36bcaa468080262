//go:build !faultinject

package app

import (
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// withFaults returns b: release builds inject nothing (faultinject_on.go).
func withFaults(b syncer.Backend, _ proxy.Mode, _ proxy.IPFamily) syncer.Backend { return b }
