//go:build ipvsvm

// Built only with -tags ipvsvm, into the test binary hack/ipvs-vm.sh boots
// in its qemu VM, on a distribution kernel whose nf_conntrack is a module
// (this machine's has it built in) and which has tc links:
// ipvs-vm kernel: linux-image-6.12-amd64

package nodeport

import (
	"os"
	"testing"

	"github.com/cilium/ebpf/btf"
)

// TestVMConntrackKfuncsOfAModule: with nf_conntrack's kfuncs in its
// module's BTF, not the kernel's, the programs load with the conntrack
// lookup on, and the drain and the masquerade port search use it.
func TestVMConntrackKfuncsOfAModule(t *testing.T) {
	vmlinux, err := btf.LoadKernelSpec()
	must(t, err)
	var fn *btf.Func
	if vmlinux.TypeByName(conntrackKfuncs[0], &fn) == nil {
		t.Fatalf("%s is in the kernel's own BTF: this kernel does not test a module's kfuncs", conntrackKfuncs[0])
	}
	t.Run("Kfuncs", TestKernelConntrackKfuncs)
	t.Run("DrainIPv4", TestKernelDrainLeavesAKernelFlowItsReplies)
	t.Run("DrainIPv6", TestKernelDrainLeavesAKernelFlowItsRepliesIPv6)
	// That test holds a kernel flow on every other masquerade port, more
	// than the table of the VM's small memory takes by default; the VM is
	// a throwaway, its own root namespace included.
	must(t, os.WriteFile("/proc/sys/net/netfilter/nf_conntrack_max", []byte("262144"), 0o644))
	t.Run("MasqueradePorts", TestKernelMasqueradeSkipsKernelFlows)
}
