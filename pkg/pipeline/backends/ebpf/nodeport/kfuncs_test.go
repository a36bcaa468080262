package nodeport

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestKernelConntrackKfuncs: the kernels of the kernel tier offer the
// conntrack lookup (nf_conntrack with its BPF support, built in or its
// module loaded), so the programs load with it on, as the drain and
// masquerade tests need.
func TestKernelConntrackKfuncs(t *testing.T) {
	netnstest.RequireKernel(t)
	if !kernelConntrackKfuncs() {
		t.Fatalf("the kernel's BTF (its own, or nf_conntrack's module) offers not every one of %v", conntrackKfuncs)
	}
	spec, err := programSpec(nil)
	must(t, err)
	var on uint8
	must(t, spec.Variables["np_kernel_ct"].Get(&on))
	if on != 1 {
		t.Errorf("the programs are loaded with np_kernel_ct %d, want 1", on)
	}
}
