package ebpf

import (
	"strings"
	"testing"
)

// TestCheckRelease: the start-up checks name the floor and the kernel they
// refuse, and accept the floor and later: the socket hooks' and, with
// --bpf-tc-interfaces, the tc programs'.
func TestCheckRelease(t *testing.T) {
	for _, tc := range []struct {
		floor floor
		name  string
		ok    map[string]bool
	}{
		{hooksFloor, "5.18", map[string]bool{
			"5.18.0": true, "6.1.0-18-amd64": true, "6.18.44-fc-v782": true, "10.0": true,
			"5.17.15": false, "4.19.0-26-amd64": false, "5.4+": false,
		}},
		{tcFloor, "6.6", map[string]bool{
			"6.6.0": true, "6.18.44-fc-v782": true, "7.0": true,
			"6.5.13": false, "6.1.0-18-amd64": false, "5.18.0": false,
		}},
	} {
		for release, ok := range tc.ok {
			err := tc.floor.check(release)
			if (err == nil) != ok {
				t.Errorf("%s floor: check(%q) = %v, want ok=%v", tc.name, release, err, ok)
			}
			if err != nil && !strings.Contains(err.Error(), tc.name) {
				t.Errorf("%s floor: check(%q): %v does not name the floor", tc.name, release, err)
			}
		}
		if err := tc.floor.check("garbage"); err == nil {
			t.Errorf("%s floor: an unreadable release passed", tc.name)
		}
	}
}

// TestCgroup2MountIn: the host's cgroup v2 root is the mount of the
// hierarchy's root, unified or hybrid; a mount of a subtree (a container's
// view, a bind mount) and cgroup v1 are not it.
func TestCgroup2MountIn(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo, want string
	}{
		{"unified", "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n", "/sys/fs/cgroup"},
		{"hybrid", "31 23 0:27 / /sys/fs/cgroup/cpu rw shared:5 - cgroup cgroup rw,cpu\n" +
			"32 23 0:28 / /sys/fs/cgroup/unified rw shared:6 - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified"},
		{"subtree first", "40 23 0:26 /kubepods /var/lib/x rw - cgroup2 cgroup2 rw\n" +
			"41 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup"},
		{"escaped", `50 23 0:26 / /mnt/with\040space rw - cgroup2 none rw` + "\n", "/mnt/with space"},
		{"v1 only", "31 23 0:27 / /sys/fs/cgroup/cpu rw shared:5 - cgroup cgroup rw,cpu\n", ""},
	} {
		got, err := cgroup2MountIn(strings.NewReader(tc.mountinfo))
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
