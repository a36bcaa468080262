package ebpf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// netnsID identifies a network namespace: the device and inode of its
// nsfs file.
type netnsID struct{ dev, ino uint64 }

// namespaces are open network namespaces, one file each.
type namespaces map[netnsID]*os.File

func (n namespaces) close() {
	for _, f := range n {
		f.Close()
	}
}

// netnsOf opens the network namespaces of the processes in cgroup and its
// descendants. Processes and cgroups that go away meanwhile are skipped.
func netnsOf(cgroup string) (namespaces, error) {
	out := namespaces{}
	err := filepath.WalkDir(cgroup, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != cgroup {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		// A threaded cgroup refuses cgroup.procs; its processes are
		// listed by its domain parent.
		procs, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, pid := range strings.Fields(string(procs)) {
			out.add(pid)
		}
		return nil
	})
	if err != nil {
		out.close()
		return nil, err
	}
	return out, nil
}

// add adds pid's network namespace unless it has it already. A stat names
// the namespace (nsfs device and inode) without opening anything, so a
// process whose namespace is known costs one system call: a cgroup holds
// many processes per namespace.
func (n namespaces) add(pid string) {
	path := filepath.Join("/proc", pid, "ns", "net")
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return
	}
	id := netnsID{st.Dev, st.Ino}
	if _, ok := n[id]; ok {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		return
	}
	// The file names the namespace to enter, should the process have
	// moved (or its PID been reused) since the stat.
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return
	}
	if id = (netnsID{st.Dev, st.Ino}); n[id] != nil {
		f.Close()
		return
	}
	n[id] = f
}

// inNetns runs fn on an OS thread of its own that has entered ns.
func inNetns(ns *os.File, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer back.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		ferr := fn()
		if err := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked: it ends with this goroutine
			// rather than serve another in the wrong namespace.
			done <- errors.Join(ferr, err)
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}
