package netnstest

import "testing"

func TestRequestPortsDoNotRepeat(t *testing.T) {
	seen := map[uint16]bool{}
	for i := 0; i < 5000; i++ {
		p := nextRequestPort()
		if p < firstRequestPort || p >= firstRequestPort+requestPorts {
			t.Fatalf("port %d outside [%d, %d)", p, firstRequestPort, firstRequestPort+requestPorts)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice within %d requests", p, i+1)
		}
		seen[p] = true
	}
}
