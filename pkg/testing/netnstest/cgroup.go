package netnstest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Socket hooks attached to a cgroup (ebpf mode's connect-time load
// balancing) see only the sockets of processes in that cgroup: a socket
// belongs to the cgroup of the process that made it, and cgroup v2 keeps
// every thread of a process in one cgroup. A test process must never move
// itself into the cgroup it attaches hooks to (its own sockets, and the
// hooks' keeper, would be translated too), so whatever should be translated
// runs as a child process started in that cgroup: the test binary again,
// told by its environment what to do (ServeChild, or the test's own
// TestMain for a role of its own).

// TestBinaryIn returns a command that runs the test binary again inside
// ns's network namespace, running no test, with env added to its
// environment: the child's TestMain must act on env before m.Run. Start it
// with StartInCgroup.
func TestBinaryIn(ctx context.Context, ns *NS, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+ns.Path(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// StartInCgroup starts cmd born in the cgroup v2 directory cgroup
// (CLONE_INTO_CGROUP): the process never runs a moment outside it, so no
// socket it makes escapes the hooks. The test removes the cgroup only after
// the process has ended.
func StartInCgroup(cmd *exec.Cmd, cgroup string) error {
	cg, err := os.Open(cgroup)
	if err != nil {
		return err
	}
	defer cg.Close()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(cg.Fd())
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s in cgroup %s: %w", cmd.Path, cgroup, err)
	}
	return nil
}
