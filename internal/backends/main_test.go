package backends

import (
	"os"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestMain lets the kernel scenario's clients in a cgroup run as this test
// binary (netnstest.ServeChild).
func TestMain(m *testing.M) {
	netnstest.ServeChild()
	os.Exit(m.Run())
}
