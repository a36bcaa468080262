package nodesetup

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/ksysctl"
)

// node returns a Fake with a stock kernel's values.
func node() *ksysctl.Fake {
	return ksysctl.NewFake(map[string]int{
		ConntrackMax: 131072, ConntrackHashsize: 32768,
		TCPEstablished: 432000, TCPCloseWait: 60, TCPBeLiberal: 0,
		UDPTimeout: 30, UDPStreamTimeout: 120,
		RouteLocalnet: 0, OOMScoreAdjFile: 0,
	})
}

func env(f *ksysctl.Fake, cpus int, initial bool) Env {
	return Env{Sysctl: f, NumCPU: func() int { return cpus },
		InInitialNetNS: func() (bool, error) { return initial, nil }}
}

func ptr(v int) *int { return &v }

// upstream is kube-proxy's default conntrack and OOM configuration.
func upstream() Config {
	return Config{IPv4: true, MaxPerCore: 32768, Min: 131072,
		TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour, OOMScoreAdj: ptr(-999)}
}

func TestSetup(t *testing.T) {
	cases := []struct {
		name      string
		cfg       func(*Config)
		cpus      int
		initial   bool
		readOnly  []string
		want      []string // writes, in order
		warnings  int
		wantError bool
	}{
		{name: "upstream defaults on 8 CPUs", cpus: 8, initial: true, want: []string{
			ConntrackMax + "=262144", ConntrackHashsize + "=65536",
			TCPEstablished + "=86400", TCPCloseWait + "=3600", OOMScoreAdjFile + "=-999"}},
		{name: "min wins on 2 CPUs; hash size already big enough", cpus: 2, initial: true, want: []string{
			TCPEstablished + "=86400", TCPCloseWait + "=3600", OOMScoreAdjFile + "=-999"}},
		{name: "maxPerCore 0 leaves the table alone", cpus: 64, initial: true,
			cfg:  func(c *Config) { c.MaxPerCore = 0 },
			want: []string{TCPEstablished + "=86400", TCPCloseWait + "=3600", OOMScoreAdjFile + "=-999"}},
		{name: "hash size skipped outside the initial namespace", cpus: 8, initial: false, warnings: 1, want: []string{
			ConntrackMax + "=262144", TCPEstablished + "=86400", TCPCloseWait + "=3600", OOMScoreAdjFile + "=-999"}},
		{name: "read-only /sys and conntrack max warn", cpus: 8, initial: true, warnings: 1,
			readOnly: []string{ConntrackMax}, want: []string{
				TCPEstablished + "=86400", TCPCloseWait + "=3600", OOMScoreAdjFile + "=-999"}},
		{name: "read-only hash size warns", cpus: 8, initial: true, warnings: 1,
			readOnly: []string{ConntrackHashsize}, want: []string{
				ConntrackMax + "=262144", TCPEstablished + "=86400", TCPCloseWait + "=3600", OOMScoreAdjFile + "=-999"}},
		{name: "UDP timeouts and be_liberal only when set", cpus: 1, initial: true,
			cfg: func(c *Config) {
				*c = Config{UDPTimeout: 15 * time.Second, UDPStreamTimeout: 2 * time.Minute, TCPBeLiberal: true}
			},
			want: []string{UDPTimeout + "=15", TCPBeLiberal + "=1"}},
		{name: "OOM score failure only warns", cpus: 1, initial: true, warnings: 1,
			cfg:      func(c *Config) { *c = Config{OOMScoreAdj: ptr(-999)} },
			readOnly: []string{OOMScoreAdjFile}},
		{name: "iptables localhost node ports set route_localnet", cpus: 1, initial: true,
			cfg:  func(c *Config) { *c = Config{IPv4: true, LocalhostNodePorts: true} },
			want: []string{RouteLocalnet + "=1"}},
		{name: "route_localnet failure is fatal, as upstream", cpus: 1, initial: true, wantError: true,
			cfg:      func(c *Config) { *c = Config{IPv4: true, LocalhostNodePorts: true} },
			readOnly: []string{RouteLocalnet}},
		// Whether localhost node ports are DNATed is desired's decision
		// (TestDecideLocalhost: not in nftables mode, not when
		// nodePortAddresses skips loopback).
		{name: "no route_localnet without localhost node ports", cpus: 1, initial: true,
			cfg: func(c *Config) { *c = Config{IPv4: true} }},
		{name: "no route_localnet without IPv4", cpus: 1, initial: true,
			cfg: func(c *Config) { *c = Config{LocalhostNodePorts: true} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := node()
			for _, name := range tc.readOnly {
				f.ReadOnly[name] = true
			}
			cfg := upstream()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			res, err := Setup(cfg, env(f, tc.cpus, tc.initial))
			if (err != nil) != tc.wantError {
				t.Fatalf("err = %v, want error %v", err, tc.wantError)
			}
			if !slices.Equal(f.Writes, tc.want) {
				t.Errorf("writes\n got %v\nwant %v", f.Writes, tc.want)
			}
			if len(res.Warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", res.Warnings, tc.warnings)
			}
		})
	}
}

func TestUnexpectedWriteErrorIsFatal(t *testing.T) {
	f := node()
	delete(f.Values, TCPEstablished) // no such sysctl: conntrack missing
	_, err := Setup(upstream(), env(f, 8, true))
	if err == nil || errors.Is(err, ksysctl.ErrNotWritable) || !strings.Contains(err.Error(), TCPEstablished) {
		t.Fatalf("err = %v, want a fatal error naming %s", err, TCPEstablished)
	}
}

func TestSecondRunChangesNothing(t *testing.T) {
	f := node()
	if _, err := Setup(upstream(), env(f, 8, true)); err != nil {
		t.Fatal(err)
	}
	f.Writes = nil
	res, err := Setup(upstream(), env(f, 8, true))
	if err != nil {
		t.Fatal(err)
	}
	// oom_score_adj is per process and always applied; nothing else.
	if !slices.Equal(f.Writes, []string{OOMScoreAdjFile + "=-999"}) || len(res.Changed) != 0 {
		t.Fatalf("second run wrote %v, changed %v", f.Writes, res.Changed)
	}
}
