package nodeport

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestWireConstantsMatchTheSource compares the Go copies of the programs'
// constants with the #defines of bpf/nodeport.c and its headers: a value
// changed on one side only would make svcproxy write what the programs
// read otherwise.
func TestWireConstantsMatchTheSource(t *testing.T) {
	headers, err := filepath.Glob("../bpf/*.h")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range append(headers, "../bpf/nodeport.c") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	defines := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+) (\d+)\b`).FindAllSubmatch(src, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		defines[string(m[1])] = n
	}
	for name, want := range map[string]int{
		"NP_F_DROP": flagDrop, "NP_F_MASQ": flagMasq, "NP_F_MAGLEV": flagMaglev, "NP_F_RANGES": flagRanges,
		"NP_F_DSR": flagDSR, "NP_ID_IN_CLUSTER": inClusterID, "NP_SCOPE_DIRECT": scopeDirect, "NP_SCOPE_TUNNEL": scopeTunnel,
		"CT_AT_INGRESS_FWD": ctAtIngressFwd, "CT_AT_EGRESS": ctAtEgress, "CT_AT_TUNNEL": ctAtTunnel,
		"CT_NEW": ctNew, "CT_F_TUNNELED": ctFlagTunneled, "NP_CFG_DRAINING": cfgDraining,
		"NP_STAT_DSR_TOO_BIG": statDSRTooBig, "NP_STAT_DSR_NO_FLOW": statDSRNoFlow, "NP_STATS_DSR": statsDSR,
	} {
		got, ok := defines[name]
		if !ok {
			t.Errorf("bpf/nodeport.c and its headers define no %s", name)
		} else if got != want {
			t.Errorf("%s is %d in bpf/, %d in Go", name, got, want)
		}
	}
}

// TestTunnelLayouts compares the Go layouts of the DSR maps' values with
// the programs' declarations.
func TestTunnelLayouts(t *testing.T) {
	spec, err := loadNodeport()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{mapTunnels: binary.Size(tunnelVal{}), mapTunnels + "6": binary.Size(tunnelVal6{}),
		mapPeers: binary.Size(peerVal(0)), mapPeers + "6": binary.Size(peerVal(0))} {
		if got := int(spec.Maps[name].ValueSize); got != want {
			t.Errorf("%s: the programs' value is %d bytes, Go's %d", name, got, want)
		}
	}
}
