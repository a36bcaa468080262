//go:build ipvsvm

// ipvs-vm kernel: linux-image-6.12-amd64

package nftables_test

import "testing"

// TestVMKernel612 is TestKernel (both families, real traffic, the
// loadBalancerSourceRanges Services among them) on Debian's 6.12 kernel,
// whose nf_tables refuses a byteorder expression whose length is not its
// size: nft before 1.1.0 writes one for a one-byte host-order field (meta
// l4proto) of an interval set's key, and such a rule failed the first
// sync (EOPNOTSUPP).
func TestVMKernel612(t *testing.T) { TestKernel(t) }
