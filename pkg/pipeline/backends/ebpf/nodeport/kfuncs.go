package nodeport

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// conntrackKfuncs are the kernel conntrack lookup's kfuncs the programs
// call (in_kernel_ct, bpf/masq.h).
var conntrackKfuncs = []string{"bpf_skb_ct_lookup", "bpf_ct_release"}

// kernelConntrackKfuncs says whether the kernel offers every one of
// conntrackKfuncs: in its own BTF when nf_conntrack is built in, else in
// the BTF of nf_conntrack's module, which must be loaded (a node whose
// rules or CNI track connections has it).
func kernelConntrackKfuncs() bool {
	for _, load := range []func() (*btf.Spec, error){
		btf.LoadKernelSpec,
		func() (*btf.Spec, error) { return btf.LoadKernelModuleSpec("nf_conntrack") },
	} {
		spec, err := load()
		if err != nil {
			continue
		}
		found := 0
		for _, name := range conntrackKfuncs {
			var fn *btf.Func
			if spec.TypeByName(name, &fn) == nil {
				found++
			}
		}
		if found == len(conntrackKfuncs) {
			return true
		}
	}
	return false
}

// setKernelConntrack tells the programs of spec whether they may call
// the kernel's conntrack lookup (np_kernel_ct).
func setKernelConntrack(spec *ebpf.CollectionSpec, on bool) error {
	v := uint8(0)
	if on {
		v = 1
	}
	return spec.Variables["np_kernel_ct"].Set(v)
}
