package nodeport

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestKernelRemovingThePinDirectoryDetaches is the operator's procedure
// after a rollback to a version without the tc programs
// (docs/user/migration.md): with no svcproxy running, `rm -r` of the tc
// pin directory takes the tc programs and np_xdp off every interface. They
// are attached by links (TCX and XDP links, not netlink), which the kernel
// detaches when their last pin and descriptor are gone.
func TestKernelRemovingThePinDirectoryDetaches(t *testing.T) {
	r := newXDPRig(t, AccelerationNative)
	r.sync(t, port("web", proxy.TCP, 30080, ep(r.epA, 8080)))
	r.p.Close()
	for _, iface := range []string{"a0", "c0"} {
		if n, err := r.node.TCXPrograms(iface); err != nil || n != 2 {
			t.Fatalf("with svcproxy stopped: %d tc programs on %s (%v), want 2", n, iface, err)
		}
	}
	if got := xdpOn(t, r.node, "a0", "c0"); len(got) != 2 {
		t.Fatalf("with svcproxy stopped: XDP on %v, want a0 and c0", got)
	}
	if out, err := exec.CommandContext(context.Background(), "rm", "-r", r.pins).CombinedOutput(); err != nil {
		t.Fatalf("rm -r %s: %v: %s", r.pins, err, out)
	}
	// bpffs drops an unlinked pin's reference after an RCU grace period.
	deadline := time.Now().Add(5 * time.Second)
	for attached := true; attached; time.Sleep(50 * time.Millisecond) {
		attached = len(xdpOn(t, r.node, "a0", "c0")) != 0
		for _, iface := range []string{"a0", "c0"} {
			n, err := r.node.TCXPrograms(iface)
			must(t, err)
			attached = attached || n != 0
		}
		if attached && time.Now().After(deadline) {
			t.Fatalf("after rm -r of the pins: XDP on %v, tc programs still attached", xdpOn(t, r.node, "a0", "c0"))
		}
	}
	if _, err := os.Stat(r.pins); !os.IsNotExist(err) {
		t.Errorf("the pin directory is still there (%v)", err)
	}
}
