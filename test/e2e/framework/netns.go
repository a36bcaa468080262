package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Every namespace this package creates is named <prefix><role>; the
// prefix is random per cluster (or E2E_NS_PREFIX), so concurrent runs, the
// demo (svpd-) and the kernel tests never meet, and hack/e2e.sh can remove
// what a killed test binary left behind.

// ip runs the ip(8) command and returns its combined output with the error.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// InNS runs a command inside a network namespace and returns its output.
func InNS(ctx context.Context, ns string, name string, args ...string) ([]byte, error) {
	argv := append([]string{"netns", "exec", ns, name}, args...)
	out, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("in %s: %s %s: %w: %s", ns, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// OutputInNS runs name with args inside network namespace ns and returns
// its standard output alone, for callers that parse it: a tool's warnings
// on standard error (iptables-nft's about legacy tables, say) would
// otherwise land in the middle of what they parse. Standard error is part
// of the error.
func OutputInNS(ctx context.Context, ns string, name string, args ...string) ([]byte, error) {
	argv := append([]string{"netns", "exec", ns, name}, args...)
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("in %s: %s %s: %w: %s", ns, name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// addNS creates a namespace with lo up, reverse-path filtering off (the
// node routes asymmetric pod traffic, as a CNI would let it) and IPv6 on,
// without duplicate address detection for the interfaces moved in later.
func addNS(name string) error {
	if err := ip("netns", "add", name); err != nil {
		return err
	}
	if err := ip("-n", name, "link", "set", "lo", "up"); err != nil {
		return err
	}
	_, err := InNS(context.Background(), name, "sysctl", "-qw",
		"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
		"net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.default.disable_ipv6=0",
		"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	return err
}

// deleteNS kills whatever still runs in the namespace (only processes in our
// own namespaces) and deletes it.
func deleteNS(name string) error {
	out, _ := exec.Command("ip", "netns", "pids", name).Output()
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	return ip("netns", "delete", name)
}

// namespacesWithPrefix lists existing namespaces whose name starts with prefix.
func namespacesWithPrefix(prefix string) []string {
	out, _ := exec.Command("ip", "netns", "list").Output()
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names
}

// DialIn opens a connection from inside network namespace ns. The socket
// is created on a locked OS thread switched into ns and keeps that
// namespace for its life, so the test process itself can talk to an API
// server or health port that exists only inside the test's namespaces,
// without putting anything in the root namespace.
func DialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var conn net.Conn
	var dialErr error
	if err := inNetns(ns, func() {
		var d net.Dialer
		conn, dialErr = d.DialContext(ctx, network, addr)
	}); err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	return conn, dialErr
}

// ListenIn opens a listener inside network namespace ns, as DialIn opens
// a connection: a test takes a port there before a proxy starts.
func ListenIn(ns, network, addr string) (net.Listener, error) {
	var l net.Listener
	var listenErr error
	if err := inNetns(ns, func() {
		var lc net.ListenConfig
		l, listenErr = lc.Listen(context.Background(), network, addr)
	}); err != nil {
		if l != nil {
			l.Close()
		}
		return nil, err
	}
	return l, listenErr
}

// inNetns runs fn on a locked OS thread switched into ns and back; the
// sockets fn opens keep ns for their life.
func inNetns(ns string, fn func()) error {
	ch := make(chan error, 1)
	go func() {
		// Not unlocked when switching back fails: the thread then dies with
		// this goroutine instead of running others in the wrong namespace.
		runtime.LockOSThread()
		restored, err := onThreadIn(ns, fn)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

func onThreadIn(ns string, fn func()) (restored bool, err error) {
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return true, fmt.Errorf("opening own netns: %w", err)
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return true, fmt.Errorf("opening netns %s: %w", ns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return true, fmt.Errorf("entering netns %s: %w", ns, err)
	}
	fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return false, fmt.Errorf("leaving netns %s: %w", ns, err)
	}
	return true, nil
}

// DialerIn returns a DialContext function for http.Transport / rest.Config.
func DialerIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return DialIn(ctx, ns, network, addr)
	}
}
