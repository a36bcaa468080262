package ebpf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestKernelRemoveLeftoversGoesByWhatIsPinned: a link and a map that a
// newer svcproxy pinned under names this one does not know are detached and
// removed as well, so that rolling back and then switching mode leaves no
// program attached to the cgroup.
func TestKernelRemoveLeftoversGoesByWhatIsPinned(t *testing.T) {
	r := newRig(t)
	p := r.proxier(t, proxy.IPv4)
	sync(t, p, stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8081)...)), proxy.RecoverySync)

	lk, err := link.AttachCgroup(link.CgroupOptions{Path: r.cgroup, Attach: ebpf.AttachCGroupInet4Connect, Program: p.kernel.coll.Programs["connect4"]})
	must(t, err)
	must(t, lk.Pin(filepath.Join(p.dir, "link_connect4fromnewer")))
	must(t, lk.Close())
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	must(t, err)
	must(t, m.Pin(filepath.Join(p.dir, "fromnewer")))
	must(t, m.Close())
	p.Close()
	if n := attachedConnect4(t, r.cgroup); n != 2 {
		t.Fatalf("before: %d programs at connect4, want 2 (this version's and the newer one's)", n)
	}

	must(t, RemoveLeftovers(r.pins))
	if n := attachedConnect4(t, r.cgroup); n != 0 {
		t.Errorf("after RemoveLeftovers: %d programs still at connect4, want 0", n)
	}
	if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
		t.Errorf("RemoveLeftovers left %s (stat: %v)", p.dir, err)
	}
}

func attachedConnect4(t *testing.T, cgroup string) int {
	t.Helper()
	f, err := os.Open(cgroup)
	must(t, err)
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupInet4Connect})
	must(t, err)
	return len(res.Programs)
}
