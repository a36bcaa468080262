package contract

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// binaries are the two programs compared.
type binaries struct {
	svcproxy, kubeProxy string
}

var (
	binOnce sync.Once
	bins    binaries
	binErr  error
)

// repoRoot is two levels above this package's module (test/e2e).
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Abs(filepath.Join(wd, "..", "..", ".."))
}

// buildBinaries builds svcproxy (or takes SVCPROXY_BIN) and upstream
// kube-proxy (hack/build-upstream.sh; cached under _output/upstream). A
// missing binary is a build step, never a skip.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	binOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			binErr = err
			return
		}
		bins.svcproxy = os.Getenv("SVCPROXY_BIN")
		if bins.svcproxy == "" {
			bins.svcproxy = filepath.Join(root, "_output", "contract", "svcproxy")
			cmd := exec.Command("go", "build", "-o", bins.svcproxy, "./cmd/svcproxy")
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build ./cmd/svcproxy: %w\n%s", err, out)
				return
			}
		}
		// CONTRACT_UPSTREAM_MINOR ("1.35") compares with an earlier minor
		// instead of the pinned one.
		args := []string{"kube-proxy"}
		if minor := os.Getenv("CONTRACT_UPSTREAM_MINOR"); minor != "" {
			args = []string{"--minor", minor, "kube-proxy"}
		}
		bins.kubeProxy, binErr = buildUpstream(root, args...)
	})
	if binErr != nil {
		t.Fatalf("building the binaries: %v", binErr)
	}
	return bins
}

// buildUpstream builds upstream's binary name with hack/build-upstream.sh
// (flags before the name, e.g. --minor 1.35) and returns its path.
func buildUpstream(root string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "build-upstream.sh"), args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/build-upstream.sh %s: %w", strings.Join(args, " "), err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), args[len(args)-1]), nil
}

// newNetns creates a network namespace for this test (prefix from
// E2E_NS_PREFIX, which hack/e2e.sh cleans up after a killed run) and
// removes it, with anything still running in it, at the end.
func newNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the contract suite needs root: both binaries run in network namespaces it creates")
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := os.Getenv("E2E_NS_PREFIX")
	if prefix == "" {
		prefix = "sve"
	}
	name := prefix + hex.EncodeToString(b) + "-contract"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up in %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		pids, _ := exec.Command("ip", "netns", "pids", name).Output()
		for _, p := range strings.Fields(string(pids)) {
			_ = exec.Command("kill", "-9", p).Run()
		}
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	return name
}

// result is one run of a binary.
type result struct {
	code           int
	stdout, stderr string
}

// output is everything the binary printed, for error messages and matching.
func (r result) output() string { return r.stdout + r.stderr }

// runIn runs bin with args inside netns ns, in dir, with a time limit.
func runIn(ns, dir, bin string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := append([]string{"netns", "exec", ns, bin}, args...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		res.code = exit.ExitCode()
	default:
		return res, fmt.Errorf("running %s %v: %w (%s)", bin, args, err, res.output())
	}
	return res, nil
}
