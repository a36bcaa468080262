package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// result records what an execution of the command did.
type result struct {
	action string // "run", "cleanup", "init-only" or "" (none reached)
	cfg    *config.Config
	stdout string
	err    error
}

// execute runs the command with args and fake actions that record the
// resolved Config instead of touching the system. runFn, if set, replaces
// the fake run.
func execute(t *testing.T, runFn modeFunc, args ...string) result {
	t.Helper()
	var res result
	record := func(name string) modeFunc {
		return func(_ context.Context, cfg *config.Config) error {
			res.action, res.cfg = name, cfg
			return nil
		}
	}
	act := actions{
		run:          record("run"),
		cleanup:      record("cleanup"),
		initOnly:     record("init-only"),
		applyGlobals: func(*config.Config) error { return nil },
	}
	if runFn != nil {
		act.run = func(ctx context.Context, cfg *config.Config) error {
			res.action, res.cfg = "run", cfg
			return runFn(ctx, cfg)
		}
	}
	cmd := newCommand(act)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	res.err = cmd.ExecuteContext(context.Background())
	res.stdout = out.String()
	return res
}

// mustRun is execute that expects success and a resolved Config.
func mustRun(t *testing.T, args ...string) *config.Config {
	t.Helper()
	res := execute(t, nil, args...)
	if res.err != nil {
		t.Fatalf("%v: %v", args, res.err)
	}
	if res.cfg == nil {
		t.Fatalf("%v: no action received a Config", args)
	}
	return res.cfg
}

// writeFile writes content to name in a fresh temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const configHeader = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// testBackend is mode's row of the backends' table (the daemon's registry
// stays nil: the tests that use it remove no leftovers).
func testBackend(t *testing.T, mode proxy.Mode) *backends.Backend {
	t.Helper()
	b, err := backends.Table.Lookup(mode)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
