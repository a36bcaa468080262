package app

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var update = flag.Bool("update", false, "rewrite testdata/*.yaml from the current output")

func TestConfigFileWins(t *testing.T) {
	path := writeFile(t, "config.conf", configHeader+`mode: nftables
hostnameOverride: file-node
nftables: {syncPeriod: 20s, minSyncPeriod: 3s}
featureGates: {LoggingAlphaOptions: true}
logging: {vmodule: [{filePattern: file, verbosity: 3}]}
clientConnection: {kubeconfig: /file/kubeconfig}
`)
	cfg := mustRun(t, "--config="+path,
		"--proxy-mode=ipvs", "--iptables-sync-period=9s", "--feature-gates=LoggingBetaOptions=false",
		"--kubeconfig=/flag/kubeconfig", "--bind-address=10.9.9.9",
		"--hostname-override= Node-A ", "-v=4", "--vmodule=flag=2",
		"--master=https://api:6443", "--service-proxy-name=p")
	checks := []struct {
		name      string
		got, want any
	}{
		{"Mode from file", string(cfg.Mode), "nftables"},
		{"SyncPeriod from file", cfg.SyncPeriod, 20 * time.Second},
		{"MinSyncPeriod from file", cfg.MinSyncPeriod, 3 * time.Second},
		{"feature gates from file", len(cfg.FeatureGates), 1},
		{"kubeconfig from file", cfg.Kubeconfig, "/file/kubeconfig"},
		{"bindAddress from file (default)", cfg.BindAddress.String(), "0.0.0.0"},
		{"hostname override flag", cfg.HostnameOverride, "node-a"},
		{"-v flag", int(cfg.Versioned.Logging.Verbosity), 4},
		{"vmodule flag then file", len(cfg.Versioned.Logging.VModule), 2},
		{"master flag", cfg.Master, "https://api:6443"},
		{"service-proxy-name flag", cfg.ServiceProxyName, "p"},
		{"config file recorded", cfg.ConfigFile, path},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	vm := cfg.Versioned.Logging.VModule
	if len(vm) == 2 && (vm[0].FilePattern != "flag" || vm[1].FilePattern != "file") {
		t.Errorf("vmodule = %+v, want flag entry then file entry", vm)
	}
}

func TestConfigFileKeepsItsHostnameWithoutFlag(t *testing.T) {
	path := writeFile(t, "config.conf", configHeader+"hostnameOverride: File-Node\n")
	if cfg := mustRun(t, "--config="+path); cfg.HostnameOverride != "File-Node" {
		t.Errorf("HostnameOverride = %q, want the file's value untouched", cfg.HostnameOverride)
	}
}

func TestEmptyHostnameOverride(t *testing.T) {
	path := writeFile(t, "config.conf", configHeader)
	for _, args := range [][]string{{"--hostname-override=  "}, {"--config=" + path, "--hostname-override=\t"}} {
		res := execute(t, nil, args...)
		if res.err == nil || !strings.Contains(res.err.Error(), "empty hostname-override is invalid") {
			t.Errorf("%v: err = %v", args, res.err)
		}
	}
}

func TestConfigFileErrors(t *testing.T) {
	bad := writeFile(t, "bad.conf", configHeader+"mode: [x]\n")
	if res := execute(t, nil, "--config="+bad); res.err == nil || res.action != "" {
		t.Errorf("undecodable file: err %v, action %q", res.err, res.action)
	}
	invalid := writeFile(t, "invalid.conf", configHeader+"oomScoreAdj: 5000\n")
	if res := execute(t, nil, "--config="+invalid); res.err == nil || !strings.Contains(res.err.Error(), "KubeProxyLinuxConfiguration.OOMScoreAdj") {
		t.Errorf("invalid file: err %v", res.err)
	}
	lenient := writeFile(t, "lenient.conf", configHeader+"mode: ipvs\nsomethingNew: 1\n")
	if cfg := mustRun(t, "--config="+lenient); cfg.Mode != proxy.ModeIPVS {
		t.Errorf("lenient file: mode %q", cfg.Mode)
	}
	if res := execute(t, nil, "--config=/nonexistent/config.conf"); res.err == nil {
		t.Error("missing file accepted")
	}
}

func TestVersion(t *testing.T) {
	res := execute(t, nil, "--version")
	line := regexp.MustCompile(`^svcproxy ` + regexp.QuoteMeta(Version) + ` \(commit (unknown|[0-9a-f]{8})(-dirty)?, go1\.[^ ,)]+\)\n$`)
	if res.err != nil || !line.MatchString(res.stdout) || res.action != "" {
		t.Errorf("--version: out %q err %v action %q", res.stdout, res.err, res.action)
	}
	for b, want := range map[buildInfo]string{
		{"v0.1.0", "1a2b3c4d5e6f708192a3b4c5d6e7f80912345678", "clean", "go1.26.8", ""}: "svcproxy v0.1.0 (commit 1a2b3c4d, go1.26.8)",
		{"v0.1.0", "1a2b3c4d5e6f708192a3b4c5d6e7f80912345678", "dirty", "go1.26.8", ""}: "svcproxy v0.1.0 (commit 1a2b3c4d-dirty, go1.26.8)",
		{"v0.0.0-dev", "unknown", "unknown", "go1.26.8", ""}:                            "svcproxy v0.0.0-dev (commit unknown, go1.26.8)",
	} {
		if got := b.line(); got != want {
			t.Errorf("%+v: --version line %q, want %q", b, got, want)
		}
	}
	res = execute(t, nil, "--version=raw")
	if res.err != nil || !strings.Contains(res.stdout, Version) || !strings.Contains(res.stdout, "go") {
		t.Errorf("--version=raw: out %q err %v", res.stdout, res.err)
	}
	if res := execute(t, nil, "--version=bogus"); res.err == nil {
		t.Error("--version=bogus accepted")
	}
}

func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "run"},
		{[]string{"--cleanup"}, "cleanup"},
		{[]string{"--init-only"}, "init-only"},
	} {
		if res := execute(t, nil, tc.args...); res.err != nil || res.action != tc.want {
			t.Errorf("%v: action %q err %v, want %q", tc.args, res.action, res.err, tc.want)
		}
	}
}

// TestRealRunIsHonest checks that a mode whose backend is not wired reports
// that it is not implemented instead of pretending to proxy.
func TestRealRunIsHonest(t *testing.T) {
	cmd := newCommand(actions{run: run, cleanup: cleanup, initOnly: initOnly,
		applyGlobals: func(*config.Config) error { return nil }})
	cmd.SetArgs([]string{"--proxy-mode=kernelspace"})
	cmd.SetOut(&strings.Builder{})
	cmd.SetErr(&strings.Builder{})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), `kernelspace`) {
		t.Errorf("err = %v", err)
	}
}

func TestConfigFileChangeStopsRun(t *testing.T) {
	path := writeFile(t, "config.conf", configHeader)
	started := make(chan struct{})
	go func() {
		<-started
		time.Sleep(50 * time.Millisecond)
		_ = os.WriteFile(path, []byte(configHeader+"mode: ipvs\n"), 0o600)
	}()
	res := execute(t, func(ctx context.Context, _ *config.Config) error {
		close(started)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("run was not stopped")
		}
	}, "--config="+path)
	if !errors.Is(res.err, config.ErrConfigFileChanged) {
		t.Fatalf("err = %v, want ErrConfigFileChanged", res.err)
	}
}

// TestWriteConfigTo compares --write-config-to's output for each mode with
// testdata; the files were reviewed field by field against contract §2.1.
func TestWriteConfigTo(t *testing.T) {
	for _, mode := range []string{"iptables", "ipvs", "nftables"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.yaml")
			res := execute(t, nil, "--proxy-mode="+mode, "--write-config-to="+out, "--healthz-port=0")
			if res.err != nil || res.action != "" {
				t.Fatalf("err %v, action %q", res.err, res.action)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "write-config-"+mode+".yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("output differs from %s:\n%s", golden, got)
			}
			// What was written must load back to the same Config.
			back := mustRun(t, "--config="+out)
			if string(back.Mode) != mode {
				t.Errorf("reloaded mode %q", back.Mode)
			}
		})
	}
}

// TestHeapSamplingOnlyWithProfiling: the runtime samples the heap only
// when /debug/pprof/heap is served, and keeps its rate then.
func TestHeapSamplingOnlyWithProfiling(t *testing.T) {
	saved := runtime.MemProfileRate
	t.Cleanup(func() { runtime.MemProfileRate = saved })
	runtime.MemProfileRate = 4096
	sampleHeap(true)
	if runtime.MemProfileRate != 4096 {
		t.Errorf("with enableProfiling the rate became %d", runtime.MemProfileRate)
	}
	sampleHeap(false)
	if runtime.MemProfileRate != 0 {
		t.Errorf("without enableProfiling the heap is still sampled every %d bytes", runtime.MemProfileRate)
	}
}
