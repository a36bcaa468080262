package netnstest

import (
	"os"
	"testing"
)

// TestMain serves the children that Clients with a Cgroup ask through.
func TestMain(m *testing.M) {
	ServeChild()
	os.Exit(m.Run())
}
