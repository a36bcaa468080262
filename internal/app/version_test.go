package app

import (
	"encoding/json"
	"runtime/debug"
	"testing"

	apiversion "k8s.io/apimachinery/pkg/version"
)

// TestBuildInfoFill: what -X set wins; what it left unset comes from Go's
// build information (a `go install` of a tag has no -X flags), else
// "unknown".
func TestBuildInfoFill(t *testing.T) {
	goInfo := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.modified", Value: "true"},
		{Key: "vcs.time", Value: "2026-11-29T00:12:09Z"},
	}}
	for _, tc := range []struct {
		name string
		in   buildInfo
		info *debug.BuildInfo
		want buildInfo
	}{{
		name: "stamped",
		in:   buildInfo{version: "v0.1.0", commit: "feedfeed", treeState: "clean", buildDate: "2026-11-28T10:00:00Z"},
		info: goInfo,
		want: buildInfo{version: "v0.1.0", commit: "feedfeed", treeState: "clean", goVersion: "go1.26.8", buildDate: "2026-11-28T10:00:00Z"},
	}, {
		name: "go install",
		in:   buildInfo{version: unstampedVersion},
		info: goInfo,
		want: buildInfo{version: "v0.2.0", commit: "0123456789abcdef0123456789abcdef01234567", treeState: "dirty", goVersion: "go1.26.8", buildDate: "2026-11-29T00:12:09Z"},
	}, {
		name: "go build outside a checkout",
		in:   buildInfo{version: unstampedVersion, goVersion: "go1.26.8"},
		info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
		want: buildInfo{version: unstampedVersion, commit: "unknown", treeState: "unknown", goVersion: "go1.26.8"},
	}, {
		name: "no build information",
		in:   buildInfo{version: unstampedVersion, goVersion: "go1.26.8"},
		want: buildInfo{version: unstampedVersion, commit: "unknown", treeState: "unknown", goVersion: "go1.26.8"},
	}} {
		if got := tc.in.fill(tc.info); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestVersionCommand: `svcproxy version` prints the --version line, -o json
// the fields of kubectl version's clientVersion.
func TestVersionCommand(t *testing.T) {
	line := execute(t, nil, "--version")
	res := execute(t, nil, "version")
	if res.err != nil || res.stdout != line.stdout || res.action != "" {
		t.Errorf("version: out %q err %v action %q; want %q", res.stdout, res.err, res.action, line.stdout)
	}
	res = execute(t, nil, "version", "-o", "json")
	var info apiversion.Info
	if err := json.Unmarshal([]byte(res.stdout), &info); res.err != nil || err != nil {
		t.Fatalf("version -o json: %q, %v, %v", res.stdout, res.err, err)
	}
	if want := readBuildInfo(); info.GitVersion != want.version || info.GitCommit != want.commit || info.GoVersion != want.goVersion || info.Platform == "" {
		t.Errorf("version -o json = %+v, want %+v", info, want)
	}
	if res := execute(t, nil, "version", "-o", "yaml"); res.err == nil {
		t.Error("version -o yaml accepted")
	}
}
