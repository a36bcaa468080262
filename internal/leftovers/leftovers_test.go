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
// record of its mode, and each row's StopNewConnections, where it has
// one, by a record "stop <mode>", so that the table's own order, rows and
// KeepsLeftoversOf decide, and nothing touches the kernel.
func recording(steps *[]string) backends.Registry {
	reg := slices.Clone(backends.Table)
	for i := range reg {
		mode := string(reg[i].Mode)
		reg[i].RemoveLeftovers = func(context.Context, *config.Config) error {
			*steps = append(*steps, mode)
			return nil
		}
		if reg[i].StopNewConnections != nil {
			reg[i].StopNewConnections = func(context.Context, *config.Config) error {
				*steps = append(*steps, "stop "+mode)
				return nil
			}
		}
	}
	return reg
}

// TestOtherModesAsUpstream: nftables mode removes IPVS mode's leftovers,
// then iptables mode's (IPVS mode's chains jump to names iptables mode's
// cleanup deletes); iptables and IPVS modes remove only the nftables
// tables (KEP-2448), and ebpf mode's pins; ebpf mode keeps the nftables
// tables, its packet path; --cleanup removes every mode's, IPVS before
// iptables. ebpf mode's tc programs take no new connection before any
// mode's leftovers go (its StopNewConnections first of all): they see
// packets before the running mode's rules.
func TestOtherModesAsUpstream(t *testing.T) {
	for mode, want := range map[proxy.Mode][]string{
		proxy.ModeNFTables: {"stop ebpf", "ebpf", "ipvs", "iptables"},
		proxy.ModeIPTables: {"stop ebpf", "nftables", "ebpf"},
		proxy.ModeIPVS:     {"stop ebpf", "nftables", "ebpf"},
		proxy.ModeEBPF:     {"ipvs", "iptables"},
	} {
		var steps []string
		if err := OtherModes(context.Background(), recording(&steps), mode, nil); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(steps, want) {
			t.Errorf("%s mode's removal of the other modes' leftovers went %q, want %q", mode, steps, want)
		}
	}
	var steps []string
	if err := All(context.Background(), recording(&steps), nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"stop ebpf", "nftables", "ebpf", "ipvs", "iptables"}; !slices.Equal(steps, want) {
		t.Errorf("--cleanup went %q, want %q", steps, want)
	}
	if err := OtherModes(context.Background(), recording(&steps), "userspace", nil); err == nil {
		t.Error("OtherModes accepted a mode without a row")
	}
}
