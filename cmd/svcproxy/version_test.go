package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apiversion "k8s.io/apimachinery/pkg/version"
)

// TestStampedVersion builds svcproxy with the flags release builds use
// (hack/version.sh ldflags) and checks that the version, commit and build
// date reach --version, `version` and `version -o json`: a misspelt -X
// target is silently ignored by the linker, so only running the binary
// shows it.
func TestStampedVersion(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	const version = "v1.2.3-stamp.4+abc"
	cmd := exec.Command(filepath.Join(root, "hack", "version.sh"), "ldflags")
	cmd.Env = append(os.Environ(), "VERSION="+version)
	ldflags, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/version.sh ldflags: %v", err)
	}
	commit, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "svcproxy")
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) string {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("svcproxy %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	line := "svcproxy " + version + " (commit " + string(commit[:8])
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if out := run(args...); !strings.HasPrefix(out, line) {
			t.Errorf("svcproxy %v = %q, want it to start with %q", args, out, line)
		}
	}
	var info apiversion.Info
	if err := json.Unmarshal([]byte(run("version", "-o", "json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.GitVersion != version || info.GitCommit != strings.TrimSpace(string(commit)) ||
		info.BuildDate == "" || info.GitTreeState == "unknown" || info.Platform == "" {
		t.Errorf("version -o json = %+v, want version %s, commit %s, a build date and tree state", info, version, commit)
	}
}
