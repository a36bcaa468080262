package benchkit

import "github.com/svcproxy/svcproxy/pkg/testing/netnstest"

// Namespace returns a fresh network namespace for one measurement, so that
// each starts from an empty kernel, and the function that deletes it
// (with every rule the measurement left in it).
func Namespace() (*netnstest.NS, func() error, error) {
	lab, err := netnstest.NewLab()
	if err != nil {
		return nil, nil, err
	}
	ns, err := lab.NewNS("bench")
	if err != nil {
		_ = lab.Close()
		return nil, nil, err
	}
	return ns, lab.Close, nil
}
