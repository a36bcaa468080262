package netnstest

import (
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// TCXPrograms counts the BPF programs attached at iface's TCX ingress and
// egress in ns: what a test checks after attaching or detaching tc
// programs.
func (ns *NS) TCXPrograms(iface string) (int, error) {
	n := 0
	err := ns.Do(func() error {
		dev, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			res, err := link.QueryPrograms(link.QueryOptions{Target: dev.Index, Attach: at})
			if err != nil {
				return err
			}
			n += len(res.Programs)
		}
		return nil
	})
	return n, err
}
