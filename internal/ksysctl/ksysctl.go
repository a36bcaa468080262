// Package ksysctl reads and writes kernel tunables: sysctls by their dotted
// name (net.netfilter.nf_conntrack_max → /proc/sys/net/netfilter/…) and, for
// the few knobs that are not sysctls (the conntrack hash size module
// parameter, the process's oom_score_adj), files by absolute path. Fake is
// an in-memory table for tests; nothing here carries policy.
package ksysctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Interface reads and writes integer tunables. A name starting with "/" is
// a file path; anything else is a sysctl name with dots.
type Interface interface {
	ReadInt(name string) (int, error)
	WriteInt(name string, value int) error
}

// ErrNotWritable wraps write failures that mean "this process may not
// change it here": a read-only mount, missing permission, or a knob the
// kernel only lets the initial network namespace change. Callers warn and
// go on; other errors are real failures.
var ErrNotWritable = errors.New("not writable")

// Proc is the real implementation over /proc/sys and the file system.
type Proc struct {
	// Root prefixes every path; empty means "/". Tests point it at a
	// temporary directory.
	Root string
}

var _ Interface = Proc{}

// Path returns the file behind name.
func (p Proc) Path(name string) string {
	root := p.Root
	if root == "" {
		root = "/"
	}
	if strings.HasPrefix(name, "/") {
		return filepath.Join(root, name)
	}
	return filepath.Join(root, "proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// ReadInt is part of Interface.
func (p Proc) ReadInt(name string) (int, error) {
	b, err := os.ReadFile(p.Path(name))
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", name, err)
	}
	// Some tunables hold several numbers (tcp_rmem); the first is the one.
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0, fmt.Errorf("read %s: empty", name)
	}
	v, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", name, err)
	}
	return v, nil
}

// WriteInt is part of Interface.
func (p Proc) WriteInt(name string, value int) error {
	// O_WRONLY without O_CREATE: a missing tunable is an error, not a file.
	f, err := os.OpenFile(p.Path(name), os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString(strconv.Itoa(value))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		if notWritable(err) {
			return fmt.Errorf("write %s=%d: %w: %w", name, value, ErrNotWritable, err)
		}
		return fmt.Errorf("write %s=%d: %w", name, value, err)
	}
	return nil
}

func notWritable(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) ||
		errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}
