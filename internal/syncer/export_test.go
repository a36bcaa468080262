package syncer

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// What the external tests (package syncer_test) run: the kernel
// quarantine cases in a mode whose backend only internal/backends opens.

// KernelMode is a mode the kernel quarantine cases run in.
type KernelMode = kernelMode

// NewKernelMode is mode, whose start makes the scenario cluster and
// returns it with what opens the mode's backend in node1 for a new
// process.
func NewKernelMode(mode proxy.Mode, start func(t *testing.T) (*scenario.Env, func(t *testing.T, f scenario.Fam) Proxier)) KernelMode {
	return kernelMode{mode: mode, start: start}
}

// KernelQuarantineCases are the kernel quarantine cases by name.
var KernelQuarantineCases = map[string]func(*testing.T, KernelMode){
	"IsolatesRejectedService":       isolateInKernel,
	"RestartWithPoisonKeepsServing": restartWithPoison,
	"RestartMeetsANewPoison":        newPoisonAtRestart,
}
