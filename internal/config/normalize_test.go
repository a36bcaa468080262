package config

import (
	"testing"
	"time"
)

// TestNormalizeKeepsOnlyTheActiveSection checks the shape upstream writes:
// one sync period pair and one masqueradeAll, in the active mode's section.
func TestNormalizeKeepsOnlyTheActiveSection(t *testing.T) {
	body := "iptables: {syncPeriod: 11s, minSyncPeriod: 2s, masqueradeAll: true}\n" +
		"ipvs: {syncPeriod: 12s, minSyncPeriod: 3s}\n" +
		"nftables: {syncPeriod: 13s, minSyncPeriod: 4s, masqueradeAll: true}\nportRange: 1-2\n"
	for _, tc := range []struct {
		mode                         string
		ipt, ipvs, nft               time.Duration
		iptMasqueradeAll, nftMasqAll bool
	}{
		{"iptables", 11 * time.Second, 0, 0, true, false},
		{"ipvs", 0, 12 * time.Second, 0, true, false},
		{"nftables", 0, 0, 13 * time.Second, false, true},
	} {
		obj := mustDefaulted(t, "mode: "+tc.mode+"\n"+body)
		ApplyPlatformDefaults(obj)
		Normalize(obj)
		if obj.IPTables.SyncPeriod.Duration != tc.ipt || obj.IPVS.SyncPeriod.Duration != tc.ipvs || obj.NFTables.SyncPeriod.Duration != tc.nft {
			t.Errorf("%s: sync periods iptables %s ipvs %s nftables %s", tc.mode,
				obj.IPTables.SyncPeriod.Duration, obj.IPVS.SyncPeriod.Duration, obj.NFTables.SyncPeriod.Duration)
		}
		if obj.IPTables.MasqueradeAll != tc.iptMasqueradeAll || obj.NFTables.MasqueradeAll != tc.nftMasqAll {
			t.Errorf("%s: masqueradeAll iptables %v nftables %v", tc.mode, obj.IPTables.MasqueradeAll, obj.NFTables.MasqueradeAll)
		}
		if obj.PortRange != "" {
			t.Errorf("%s: portRange %q kept", tc.mode, obj.PortRange)
		}
	}
}
