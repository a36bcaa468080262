package ipvs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
)

// Sysctl reads and writes kernel parameters by their /proc/sys path
// ("net/ipv4/vs/conntrack").
type Sysctl interface {
	Get(name string) (string, error)
	Set(name, value string) error
}

// ProcSysctl is Sysctl over /proc/sys.
type ProcSysctl struct{}

// Get is part of Sysctl.
func (ProcSysctl) Get(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", name))
	return strings.TrimSpace(string(b)), err
}

// Set is part of Sysctl.
func (ProcSysctl) Set(name, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", name), []byte(value), 0o640)
}

// Init is part of syncer.Proxier: the privileged, idempotent setup. A
// sysctl file that is read-only (a container without /proc/sys write
// access, where the node was prepared otherwise) is logged, not fatal.
func (p *Proxier) Init(context.Context) error {
	var errs []error
	for _, s := range p.sysctls() {
		if cur, err := p.c.Sysctl.Get(s.name); err == nil && cur == s.value {
			continue
		}
		if err := p.c.Sysctl.Set(s.name, s.value); err != nil {
			if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) {
				slog.Warn("cannot set sysctl", "name", s.name, "value", s.value, "err", err)
				continue
			}
			errs = append(errs, fmt.Errorf("setting sysctl %s=%s: %w", s.name, s.value, err))
		}
	}
	t := kipvs.Timeouts{TCP: p.opts.TCPTimeout, TCPFin: p.opts.TCPFinTimeout, UDP: p.opts.UDPTimeout}
	if t != (kipvs.Timeouts{}) {
		if err := p.c.IPVS.SetTimeouts(t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

type sysctlValue struct{ name, value string }

// sysctls lists what IPVS mode needs. conn_reuse_mode=0 works around slow
// port reuse only on kernels before 5.9, which fixed it (and where 0 would
// instead break reuse after a real server is removed).
func (p *Proxier) sysctls() []sysctlValue {
	out := []sysctlValue{
		{"net/ipv4/vs/conntrack", "1"},
		{"net/ipv4/vs/expire_nodest_conn", "1"},
		{"net/ipv4/vs/expire_quiescent_template", "1"},
		{"net/ipv4/ip_forward", "1"},
	}
	if major, minor, ok := p.kernelVersion(); ok && (major < 5 || major == 5 && minor < 9) {
		out = append(out, sysctlValue{"net/ipv4/vs/conn_reuse_mode", "0"})
	}
	if p.opts.StrictARP {
		out = append(out, sysctlValue{"net/ipv4/conf/all/arp_ignore", "1"}, sysctlValue{"net/ipv4/conf/all/arp_announce", "2"})
	}
	return out
}

func (p *Proxier) kernelVersion() (major, minor int, ok bool) {
	get := p.c.KernelVersion
	if get == nil {
		get = uname
	}
	release, err := get()
	if err != nil {
		return 0, 0, false
	}
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor, err1 == nil && err2 == nil
}

func uname() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}
