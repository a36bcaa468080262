package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// LeftoversPresent reports whether pinDir holds a family directory of
// pins: only reading the file system, so that a node that never ran the
// mode loads nothing.
func LeftoversPresent(pinDir string) (bool, error) {
	for _, f := range proxy.Families {
		_, err := os.Stat(familyDir(pinDir, f))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	return false, nil
}

// RemoveLeftovers detaches the programs pinned in pinDir and removes their
// pins and maps, both families, and pinDir when empty: what Cleanup does,
// without a Proxier (other modes' start, --cleanup).
func RemoveLeftovers(pinDir string) error {
	var errs []error
	for _, f := range proxy.Families {
		if err := bpfmap.RemovePins(familyDir(pinDir, f)); err != nil {
			errs = append(errs, fmt.Errorf("ebpf: %s: %w", f, err))
		}
	}
	if err := os.Remove(pinDir); err != nil && !errors.Is(err, os.ErrNotExist) && !isNotEmpty(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func familyDir(pinDir string, family proxy.IPFamily) string {
	return filepath.Join(pinDir, strings.ToLower(string(family)))
}
