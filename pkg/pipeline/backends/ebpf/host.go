package ebpf

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// What the host must offer the mode. The floors are the newest kernel
// feature each set of programs uses (README.md, "Kernel floor").
var (
	// The socket hooks call bpf_set_retval.
	hooksFloor = floor{5, 18, "bpf_set_retval in the connect hooks"}
	// The tc programs attach through TCX links.
	tcFloor = floor{6, 6, "TCX links for the tc programs of --bpf-tc-interfaces"}
)

const bpffsRoot = "/sys/fs/bpf"

// floor is a kernel release a feature needs, and what for.
type floor struct {
	major, minor int
	why          string
}

// CheckHost fails, naming what is missing, unless this kernel can run the
// programs: release 5.18 or later, BPF with cgroup socket-address
// programs, and cgroup v2 (mounted, or mountable).
func CheckHost() error {
	if err := checkKernel(hooksFloor); err != nil {
		return err
	}
	if err := features.HaveProgramType(ebpf.CGroupSockAddr); err != nil {
		return fmt.Errorf("ebpf mode needs BPF cgroup socket-address programs (CONFIG_BPF_SYSCALL, CONFIG_CGROUP_BPF): %w", err)
	}
	if err := haveCgroup2(); err != nil {
		return err
	}
	return nil
}

// CheckTCHost fails, naming what is missing, unless this kernel can attach
// the tc programs (release 6.6 or later): at start rather than at the
// first sync's attach.
func CheckTCHost() error { return checkKernel(tcFloor) }

func checkKernel(f floor) error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	return f.check(unix.ByteSliceToString(u.Release[:]))
}

// check compares a kernel release ("6.1.0-18-amd64") with the floor.
func (f floor) check(release string) error {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("ebpf mode: cannot read the kernel release %q", release)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return fmt.Errorf("ebpf mode: cannot read the kernel release %q", release)
	}
	if major < f.major || major == f.major && minor < f.minor {
		return fmt.Errorf("ebpf mode needs kernel %d.%d or later (%s); this kernel is %s", f.major, f.minor, f.why, release)
	}
	return nil
}

// haveCgroup2 fails when cgroup v2 is neither mounted nor known to the
// kernel.
func haveCgroup2() error {
	if _, err := Cgroup2Mount(); err == nil {
		return nil
	}
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "\tcgroup2\n") {
		return errors.New("ebpf mode needs cgroup v2: the kernel has no cgroup2 file system")
	}
	return nil
}

// Cgroup2Mount returns where this process sees the cgroup v2 hierarchy's
// root mounted (the unified mount, or a hybrid host's
// /sys/fs/cgroup/unified).
func Cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return cgroup2MountIn(f)
}

// cgroup2MountIn reads a mountinfo table: "id parent dev root mountpoint
// options [optional...] - fstype source superoptions". Only a mount of
// the hierarchy's root counts: a mount of a subtree is not the host's root.
func cgroup2MountIn(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" || fields[3] != "/" {
			continue
		}
		return unescapeMountinfo(fields[4]), nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup v2 mount in /proc/self/mountinfo")
}

// unescapeMountinfo undoes mountinfo's octal escapes (a space is \040).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountCgroup2 mounts the cgroup v2 hierarchy at dir (made if missing),
// for a host that has no unified mount; a cgroup2 already there is used.
func MountCgroup2(dir string) error {
	if isFS(dir, unix.CGROUP2_SUPER_MAGIC) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("cgroup2", dir, "cgroup2", 0, ""); err != nil {
		return fmt.Errorf("mounting cgroup2 at %s: %w", dir, err)
	}
	return nil
}

// EnsurePinDir makes sure pinDir can hold pins. The default's parent,
// /sys/fs/bpf, gets a bpffs mounted when it has none (a host whose init
// does not mount it); any other directory must already be on a bpffs.
func EnsurePinDir(pinDir string) error {
	parent := filepath.Dir(pinDir)
	if isFS(pinDir, unix.BPF_FS_MAGIC) || isFS(parent, unix.BPF_FS_MAGIC) {
		return nil
	}
	if pinDir != DefaultPinDir {
		return fmt.Errorf("ebpf mode: the pin directory %s is not on a bpffs (mount -t bpf bpffs %s)", pinDir, parent)
	}
	if err := os.MkdirAll(bpffsRoot, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpffs", bpffsRoot, "bpf", 0, ""); err != nil {
		return fmt.Errorf("ebpf mode needs a bpffs: mounting one at %s: %w", bpffsRoot, err)
	}
	return nil
}

func isFS(dir string, magic int64) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && int64(st.Type) == magic
}
