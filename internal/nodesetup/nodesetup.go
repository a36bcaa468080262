// Package nodesetup does the node tuning kube-proxy does at start and in
// --init-only: conntrack table size and hash size, conntrack timeouts and
// tcp_be_liberal, the process's OOM score, and route_localnet where
// localhost node ports need it. Each step reads first and writes only a
// different value; a knob this process may not change (read-only /sys,
// a non-initial network namespace) is skipped with a warning. Errors are
// fatal only where upstream's are.
package nodesetup

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/ksysctl"
)

// The tunables, as upstream names them.
const (
	ConntrackMax      = "net.netfilter.nf_conntrack_max"
	ConntrackHashsize = "/sys/module/nf_conntrack/parameters/hashsize"
	TCPEstablished    = "net.netfilter.nf_conntrack_tcp_timeout_established"
	TCPCloseWait      = "net.netfilter.nf_conntrack_tcp_timeout_close_wait"
	TCPBeLiberal      = "net.netfilter.nf_conntrack_tcp_be_liberal"
	UDPTimeout        = "net.netfilter.nf_conntrack_udp_timeout"
	UDPStreamTimeout  = "net.netfilter.nf_conntrack_udp_timeout_stream"
	RouteLocalnet     = "net.ipv4.conf.all.route_localnet"
	OOMScoreAdjFile   = "/proc/self/oom_score_adj"
)

// Config is what Setup needs; the app maps config.Config onto it. Zero
// values leave the kernel alone, as upstream's nil/zero fields do.
type Config struct {
	// IPv4 says the proxy serves the IPv4 family.
	IPv4 bool

	// MaxPerCore × CPUs, at least Min, is nf_conntrack_max; MaxPerCore 0
	// leaves it alone.
	MaxPerCore int
	Min        int
	// TCP and UDP conntrack timeouts; 0 leaves each alone.
	TCPEstablishedTimeout time.Duration
	TCPCloseWaitTimeout   time.Duration
	UDPTimeout            time.Duration
	UDPStreamTimeout      time.Duration
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal=1.
	TCPBeLiberal bool

	// OOMScoreAdj, if set, is applied to this process.
	OOMScoreAdj *int

	// LocalhostNodePorts: IPv4 node ports on 127.0.0.0/8 are DNATed
	// (desired.DecideLocalhost decides so in iptables mode), which needs
	// route_localnet.
	LocalhostNodePorts bool
}

// Env is the node Setup works on.
type Env struct {
	Sysctl ksysctl.Interface
	// NumCPU defaults to runtime.NumCPU.
	NumCPU func() int
	// InInitialNetNS says whether this process is in the host's network
	// namespace; the hash size can be changed only from there.
	InInitialNetNS func() (bool, error)
}

// Result says what Setup changed and what it had to skip.
type Result struct {
	Changed  []string // "name=value"
	Warnings []string
}

// InInitialNetNS compares this process's network namespace with PID 1's,
// as upstream does; without a view of PID 1 (no host PID namespace) it
// reports an error and Setup leaves the hash size alone.
func InInitialNetNS() (bool, error) {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return false, fmt.Errorf("own network namespace: %w", err)
	}
	init, err := os.Readlink("/proc/1/ns/net")
	if err != nil {
		return false, fmt.Errorf("network namespace of PID 1: %w", err)
	}
	return self == init, nil
}

// Setup tunes the node; an error means the proxy must not start.
func Setup(cfg Config, env Env) (Result, error) {
	s := &setup{env: env}
	if s.env.NumCPU == nil {
		s.env.NumCPU = runtime.NumCPU
	}
	for _, step := range []func(Config) error{
		s.conntrackMax, s.conntrackTimeouts, s.oomScore, s.routeLocalnet,
	} {
		if err := step(cfg); err != nil {
			return s.res, err
		}
	}
	return s.res, nil
}

type setup struct {
	env Env
	res Result
}

func (s *setup) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	klog.InfoS("Warning: node setup step skipped", "reason", msg)
	s.res.Warnings = append(s.res.Warnings, msg)
}

// ensure writes value unless the tunable already has it. A tunable this
// process may not change is skipped with a warning.
func (s *setup) ensure(name string, value int) error {
	if cur, err := s.env.Sysctl.ReadInt(name); err == nil && cur == value {
		return nil
	}
	err := s.env.Sysctl.WriteInt(name, value)
	switch {
	case errors.Is(err, ksysctl.ErrNotWritable):
		s.warn("cannot set %s=%d here: %v", name, value, err)
		return nil
	case err != nil:
		return fmt.Errorf("setting %s: %w", name, err)
	}
	klog.InfoS("Set sysctl", "entry", name, "value", value)
	s.res.Changed = append(s.res.Changed, fmt.Sprintf("%s=%d", name, value))
	return nil
}

// conntrackMax sets nf_conntrack_max and, from the initial namespace only,
// raises the hash size to max/4 (never lowers it).
func (s *setup) conntrackMax(cfg Config) error {
	if cfg.MaxPerCore <= 0 {
		return nil
	}
	max := max(cfg.MaxPerCore*s.env.NumCPU(), cfg.Min)
	if err := s.ensure(ConntrackMax, max); err != nil {
		return err
	}
	// The hash size is sized for the table; with the table left as it was
	// (not writable here), leave the hash size too.
	if cur, err := s.env.Sysctl.ReadInt(ConntrackMax); err != nil || cur != max {
		return nil
	}
	if s.env.InInitialNetNS != nil {
		initial, err := s.env.InInitialNetNS()
		if err != nil || !initial {
			s.warn("not in the initial network namespace (%v); leaving %s alone", err, ConntrackHashsize)
			return nil
		}
	}
	hashsize, err := s.env.Sysctl.ReadInt(ConntrackHashsize)
	if err != nil {
		return fmt.Errorf("reading conntrack hash size: %w", err)
	}
	if hashsize >= max/4 {
		return nil
	}
	return s.ensure(ConntrackHashsize, max/4)
}

func (s *setup) conntrackTimeouts(cfg Config) error {
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{TCPEstablished, cfg.TCPEstablishedTimeout},
		{TCPCloseWait, cfg.TCPCloseWaitTimeout},
		{UDPTimeout, cfg.UDPTimeout},
		{UDPStreamTimeout, cfg.UDPStreamTimeout},
	} {
		if t.d <= 0 {
			continue
		}
		if err := s.ensure(t.name, int(t.d/time.Second)); err != nil {
			return err
		}
	}
	if cfg.TCPBeLiberal {
		return s.ensure(TCPBeLiberal, 1)
	}
	return nil
}

// oomScore applies oomScoreAdj; upstream only logs a failure.
func (s *setup) oomScore(cfg Config) error {
	if cfg.OOMScoreAdj == nil {
		return nil
	}
	if err := s.env.Sysctl.WriteInt(OOMScoreAdjFile, *cfg.OOMScoreAdj); err != nil {
		s.warn("cannot apply oomScoreAdj %d: %v", *cfg.OOMScoreAdj, err)
	}
	return nil
}

// routeLocalnet lets iptables mode DNAT node ports on 127.0.0.1; upstream
// fails to start when it cannot set it.
func (s *setup) routeLocalnet(cfg Config) error {
	if !cfg.IPv4 || !cfg.LocalhostNodePorts {
		return nil
	}
	if cur, err := s.env.Sysctl.ReadInt(RouteLocalnet); err == nil && cur == 1 {
		return nil
	}
	if err := s.env.Sysctl.WriteInt(RouteLocalnet, 1); err != nil {
		return fmt.Errorf("localhost node ports need %s=1: %w", RouteLocalnet, err)
	}
	s.res.Changed = append(s.res.Changed, RouteLocalnet+"=1")
	return nil
}
