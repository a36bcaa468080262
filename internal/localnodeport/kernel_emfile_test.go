package localnodeport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// emfileHelperEnv, set to a port, turns the test binary into the helper of
// TestKernelAcceptOutOfDescriptors: lowering RLIMIT_NOFILE and using up
// every descriptor would break any test sharing its process.
const emfileHelperEnv = "LOCALNODEPORT_EMFILE_HELPER_PORT"

func TestMain(m *testing.M) {
	if port := os.Getenv(emfileHelperEnv); port != "" {
		os.Exit(emfileHelper(port))
	}
	os.Exit(m.Run())
}

// countingListener counts failed Accepts.
type countingListener struct {
	net.Listener
	failed *atomic.Int64
}

func (c countingListener) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err != nil {
		c.failed.Add(1)
	}
	return conn, err
}

// emfileHelper serves port on 127.0.0.1 with every file descriptor in use
// and prints "ready"; given a line on stdin (the clients are waiting in
// the backlog), it prints the failed accepts and the CPU time the process
// used over the next half second.
func emfileHelper(port string) int {
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var failed atomic.Int64
	p := New(context.Background(), proxy.IPv4, Options{})
	p.listen = func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		return countingListener{Listener: ln, failed: &failed}, err
	}
	p.Sync([]Spec{{Port: uint16(n), Endpoints: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}}})
	if len(p.Ports()) != 1 {
		fmt.Fprintln(os.Stderr, "no listener")
		return 2
	}
	if err := useUpDescriptors(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 2
	}
	before, cpuBefore := failed.Load(), cpuTime()
	time.Sleep(500 * time.Millisecond)
	fmt.Println(failed.Load()-before, int64(cpuTime()-cpuBefore))
	return 0
}

// useUpDescriptors lowers the process's descriptor limit, so exhausting
// it is quick, and opens files until none is left.
func useUpDescriptors() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur = 64
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	for {
		if _, err := os.Open(os.DevNull); err != nil {
			return nil //nolint:nilerr // out of descriptors, as wanted
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestKernelAcceptOutOfDescriptors: a proxy out of file descriptors, with
// clients waiting in its listener's backlog, backs off between failed
// accepts instead of retrying on a full core. The proxy runs in a helper
// process in a namespace of the test's own.
func TestKernelAcceptOutOfDescriptors(t *testing.T) {
	netnstest.RequireKernel(t)
	ns, err := netnstest.New(t).NewNS("lnp")
	if err != nil {
		t.Fatal(err)
	}
	const port = 30100
	helper, out, stderr := startEMFILEHelper(t, ns, port)
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("helper: %q, %v; stderr:\n%s", line, err, stderr())
	}
	for range 4 {
		err := ns.Do(func() error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(lo4, port).String(), 2*time.Second)
			if err == nil {
				t.Cleanup(func() { _ = c.Close() })
			}
			return err
		})
		if err != nil {
			t.Fatalf("connecting to the helper's backlog: %v", err)
		}
	}
	fmt.Fprintln(helper, "count")
	line, err := out.ReadString('\n')
	var failed, cpu int64
	if _, scanErr := fmt.Sscan(line, &failed, &cpu); err != nil || scanErr != nil {
		t.Fatalf("helper: %q, %v; stderr:\n%s", line, err, stderr())
	}
	t.Logf("out of descriptors: %d failed accepts and %v of CPU in 0.5s", failed, time.Duration(cpu))
	// Backing off from 5 ms, half a second holds about seven attempts.
	if failed > 20 {
		t.Errorf("%d failed accepts in 0.5s out of descriptors, want a backoff (at most 20)", failed)
	}
}

// startEMFILEHelper runs emfileHelper in ns (a process started there
// lives there) and returns its stdin, its stdout and a function reading
// its stderr so far.
func startEMFILEHelper(t *testing.T, ns *netnstest.NS, port int) (io.Writer, *bufio.Reader, func() string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), emfileHelperEnv+"="+strconv.Itoa(port))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrPath := filepath.Join(t.TempDir(), "stderr")
	stderr, err := os.Create(stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := ns.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	// Before the namespace goes: the helper must not outlive the test.
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return stdin, bufio.NewReader(stdout), func() string {
		b, _ := os.ReadFile(stderrPath)
		return string(b)
	}
}
