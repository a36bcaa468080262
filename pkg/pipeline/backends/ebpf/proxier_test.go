package ebpf

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestNotCgroup2 refuses to load for a directory outside cgroup v2 and
// creates nothing.
func TestNotCgroup2(t *testing.T) {
	pins := t.TempDir()
	p, err := New(proxy.IPv4, Options{PinDir: pins, Cgroup: t.TempDir(), NodeNetns: 1})
	must(t, err)
	err = p.Sync(context.Background(), stateOf(proxy.IPv4), proxy.RecoverySync)
	if err == nil || !strings.Contains(err.Error(), "not a cgroup v2 directory") {
		t.Errorf("Sync with a plain directory as the cgroup: %v, want it named as not cgroup v2", err)
	}
	if left, _ := os.ReadDir(pins); len(left) != 0 {
		t.Errorf("the refused load left %d entries in the pin directory", len(left))
	}
}
