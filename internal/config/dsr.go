package config

import (
	"errors"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// DefaultDSRNamespace is where the nodes' DSR Leases live unless
// --bpf-dsr-namespace says otherwise: deploy/components/dsr creates it
// and lets the proxies' ServiceAccount write Leases there alone.
const DefaultDSRNamespace = "svcproxy-dsr"

// ValidateDSR refuses --bpf-dsr where nothing could tunnel or
// decapsulate: only ebpf mode's tc programs (--bpf-tc-interfaces) do.
// A start that accepted it would advertise a decapsulation this node
// cannot do, and its peers would send it traffic it drops.
func ValidateDSR(cfg *Config) error {
	if !cfg.BPFDSR {
		return nil
	}
	if cfg.Mode != proxy.ModeEBPF {
		return errors.New("--bpf-dsr needs --proxy-mode=ebpf (mode: ebpf): only ebpf mode's tc programs tunnel and decapsulate")
	}
	if len(cfg.BPFTCInterfaces) == 0 {
		return errors.New("--bpf-dsr needs --bpf-tc-interfaces: the tc programs on those interfaces tunnel and decapsulate")
	}
	if cfg.BPFDSRNamespace == "" {
		return errors.New("--bpf-dsr-namespace must not be empty with --bpf-dsr: the nodes advertise there")
	}
	return nil
}
