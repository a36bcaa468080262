// Package knfacct is a thin client for the kernel's extended accounting
// objects (nfacct, NFNL_SUBSYS_ACCT): named packet and byte counters that
// iptables rules count into with "-m nfacct --nfacct-name NAME". Objects
// live per network namespace. The iptables backend ensures them before
// writing rules that name them; the metrics read them at scrape time. It
// knows nothing about Kubernetes. Fake is an in-memory stand-in for tests.
package knfacct

import (
	"errors"
	"fmt"
)

// MaxNameLen is the longest object name the kernel takes (NFACCT_NAME_MAX
// is 32 bytes with the terminating NUL).
const MaxNameLen = 31

// Interface is the nfacct objects of one network namespace.
type Interface interface {
	// Ensure creates the object name unless it exists; an existing
	// object keeps its counts.
	Ensure(name string) error
	// Get returns the packets counted by the object name (ErrNotFound if
	// there is none).
	Get(name string) (packets uint64, err error)
}

var (
	// ErrNotFound reports a missing object.
	ErrNotFound = errors.New("nfacct object not found")
	// ErrNotSupported reports a kernel without nfnetlink_acct.
	ErrNotSupported = errors.New("nfacct not supported by the kernel")
	// ErrInvalidName reports a name the kernel cannot hold.
	ErrInvalidName = errors.New("invalid nfacct object name")
)

// checkName refuses names the kernel would truncate or reject, so that a
// rule never names an object other than the one ensured.
func checkName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w %q: want 1 to %d bytes", ErrInvalidName, name, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return fmt.Errorf("%w %q: NUL byte", ErrInvalidName, name)
		}
	}
	return nil
}
