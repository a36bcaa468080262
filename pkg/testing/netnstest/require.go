package netnstest

import (
	"os"
	"os/exec"
	"testing"
)

// RequireKernel fails t unless the process may create network namespaces
// (it runs as root) and each of tools is on PATH. It fails rather than
// skips: a kernel test that did not run must not count as passed.
func RequireKernel(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("kernel tests need root (network namespaces)")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("kernel tests need %s: %v", tool, err)
		}
	}
}
