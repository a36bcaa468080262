package ebpf

import (
	"errors"
	"syscall"
)

// isNotEmpty tells a directory that stays because something else holds it.
func isNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) ||
		errors.Is(err, syscall.EBUSY)
}
