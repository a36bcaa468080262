package ipvs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestVirtualServers counts the virtual servers of /proc/net/ip_vs, real
// servers and headers aside, and none without the file (no ip_vs module).
func TestVirtualServers(t *testing.T) {
	dir := t.TempDir()
	old := procIPVS
	t.Cleanup(func() { procIPVS = old })
	for _, c := range []struct {
		name, text string
		want       int
	}{
		{"no module", "", 0},
		{"empty", "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n", 0},
		{"two", "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n" +
			"TCP  0A600001:0050 rr\n  -> 0A000002:1F90      Masq    1      0          0\nUDP  0A60000A:0035 rr\n", 2},
	} {
		procIPVS = filepath.Join(dir, c.name)
		if c.text != "" {
			if err := os.WriteFile(procIPVS, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := virtualServers()
		if err != nil || got != c.want {
			t.Errorf("%s: got %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}
