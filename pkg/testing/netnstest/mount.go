package netnstest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// MountThrowaway mounts a file system of type fstype (bpf, cgroup2) in a
// temporary directory, unmounted at the end of the test.
func MountThrowaway(t testing.TB, fstype string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("none", dir, fstype, 0, ""); err != nil {
		t.Fatalf("mount -t %s: %v", fstype, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// ThrowawayCgroup creates a cgroup v2 child of its own, named after
// prefix, in a throwaway cgroup2 mount: the only cgroup a test may attach
// socket hooks to. The cgroup and the mount go at the end of the test;
// processes the test left in it are killed first (a Lab's client children
// may outlive the cgroup's cleanup when the Lab was made before it).
func ThrowawayCgroup(t testing.TB, prefix string) string {
	t.Helper()
	// Every cgroup2 mount shows the same hierarchy: the name must not
	// collide with another test process's.
	dir := filepath.Join(MountThrowaway(t, "cgroup2"), fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeCgroup(dir); err != nil {
			t.Errorf("removing the test cgroup: %v", err)
		}
	})
	return dir
}

// removeCgroup kills what is left in dir (cgroup.kill) and removes it once
// the processes are gone, which takes a moment after the kill.
func removeCgroup(dir string) error {
	err := os.Remove(dir)
	if !errors.Is(err, unix.EBUSY) {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("killing what is left in %s: %w", dir, err)
	}
	for deadline := time.Now().Add(5 * time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		err = os.Remove(dir)
	}
	return err
}
