package leftovers

import (
	"context"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// recording is backends.Table with each row's cleanup replaced by a
// record of its mode, so that the table's own order and KeepsLeftoversOf
// decide, and nothing touches the kernel.
func recording(removed *[]proxy.Mode) backends.Registry {
	reg := slices.Clone(backends.Table)
	for i := range reg {
		mode := reg[i].Mode
		reg[i].RemoveLeftovers = func(context.Context, *config.Config) error {
			*removed = append(*removed, mode)
			return nil
		}
	}
	return reg
}

// TestOtherModesAsUpstream: nftables mode removes IPVS mode's leftovers,
// then iptables mode's (IPVS mode's chains jump to names iptables mode's
// cleanup deletes); iptables and IPVS modes remove only the nftables
// tables (KEP-2448), and ebpf mode's pins; ebpf mode keeps the nftables
// tables, its packet path; --cleanup removes every mode's, IPVS before
// iptables.
func TestOtherModesAsUpstream(t *testing.T) {
	for mode, want := range map[proxy.Mode][]proxy.Mode{
		proxy.ModeNFTables: {proxy.ModeEBPF, proxy.ModeIPVS, proxy.ModeIPTables},
		proxy.ModeIPTables: {proxy.ModeNFTables, proxy.ModeEBPF},
		proxy.ModeIPVS:     {proxy.ModeNFTables, proxy.ModeEBPF},
		proxy.ModeEBPF:     {proxy.ModeIPVS, proxy.ModeIPTables},
	} {
		var removed []proxy.Mode
		if err := OtherModes(context.Background(), recording(&removed), mode, nil); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(removed, want) {
			t.Errorf("%s mode removed the leftovers of %v, want %v", mode, removed, want)
		}
	}
	var removed []proxy.Mode
	if err := All(context.Background(), recording(&removed), nil); err != nil {
		t.Fatal(err)
	}
	if want := []proxy.Mode{proxy.ModeNFTables, proxy.ModeEBPF, proxy.ModeIPVS, proxy.ModeIPTables}; !slices.Equal(removed, want) {
		t.Errorf("--cleanup removed the leftovers of %v, want %v", removed, want)
	}
	if err := OtherModes(context.Background(), recording(&removed), "userspace", nil); err == nil {
		t.Error("OtherModes accepted a mode without a row")
	}
}
