//go:build !faultinject

package app

import (
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// withFaults returns p: release builds inject nothing (faultinject_on.go).
func withFaults(p syncer.Proxier, _ config.Mode, _ proxy.IPFamily) syncer.Proxier { return p }
