package app

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Version is the release, set at build time with
// -ldflags "-X github.com/svcproxy/svcproxy/internal/app.Version=v1.2.3".
var Version = "v0.0.0-dev"

// gitCommit and gitTreeState may be set with -X when the build has no VCS
// information (a container build without .git, hack/image.sh building from
// git archive); otherwise vcs.revision and vcs.modified are used.
var gitCommit, gitTreeState = "", ""

// buildInfo is what --version=raw prints.
type buildInfo struct {
	version, commit, treeState, goVersion string
}

func readBuildInfo() buildInfo {
	b := buildInfo{version: Version, commit: gitCommit, treeState: gitTreeState, goVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.goVersion = info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.commit == "" {
				b.commit = s.Value
			}
		case "vcs.modified":
			if b.treeState == "" {
				b.treeState = map[string]string{"true": "dirty", "false": "clean"}[s.Value]
			}
		}
	}
	if b.commit == "" {
		b.commit = "unknown"
	}
	if b.treeState == "" {
		b.treeState = "unknown"
	}
	return b
}

// line is what --version prints: "svcproxy v0.1.0 (commit 1a2b3c4d, go1.26.8)",
// the commit short and marked -dirty when the tree was modified.
func (b buildInfo) line() string {
	commit := b.commit
	if len(commit) > 8 && commit != "unknown" {
		commit = commit[:8]
	}
	if b.treeState == "dirty" {
		commit += "-dirty"
	}
	return fmt.Sprintf("svcproxy %s (commit %s, %s)", b.version, commit, b.goVersion)
}

// printVersion is --version (one line, like kube-proxy's "Kubernetes
// vX.Y.Z", with the commit and Go version) and --version=raw (everything, like kube-proxy's version.Info).
func printVersion(w io.Writer, mode string) error {
	switch mode {
	case "true":
		_, err := fmt.Fprintln(w, readBuildInfo().line())
		return err
	case "raw":
		b := readBuildInfo()
		_, err := fmt.Fprintf(w, "svcproxy version.Info{GitVersion:%q, GitCommit:%q, GitTreeState:%q, GoVersion:%q, Compiler:%q, Platform:\"%s/%s\"}\n",
			b.version, b.commit, b.treeState, b.goVersion, runtime.Compiler, runtime.GOOS, runtime.GOARCH)
		return err
	default:
		return fmt.Errorf("--version: invalid value %q: must be true, false or raw", mode)
	}
}

// versionValue is --version as upstream's verflag parses it: a boolean,
// "raw", or "vX.Y.Z..." which sets the reported version (it must keep the
// binary's major.minor.patch) and lets the command run on.
type versionValue struct{ mode *string }

func (v versionValue) Type() string     { return "version" }
func (v versionValue) String() string   { return *v.mode }
func (v versionValue) IsBoolFlag() bool { return true }
func (v versionValue) Set(s string) error {
	if s == "raw" {
		*v.mode = s
		return nil
	}
	if strings.HasPrefix(s, "v") {
		if err := setDynamicVersion(s); err != nil {
			return err
		}
		*v.mode = "false"
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.mode = strconv.FormatBool(b)
	return nil
}

func addVersionFlag(fs *pflag.FlagSet, mode *string) {
	*mode = "false"
	fs.Var(versionValue{mode}, "version", "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version")
	fs.Lookup("version").NoOptDefVal = "true"
}

// setDynamicVersion replaces the reported version by s, which must have the
// same major, minor and patch as the built-in one (component-base's rule).
func setDynamicVersion(s string) error {
	if s == Version {
		return nil
	}
	want, err := utilversion.ParseSemantic(s)
	if err != nil {
		return err
	}
	have, err := utilversion.ParseSemantic(Version)
	if err != nil {
		return fmt.Errorf("the built-in version %q is not semantic: %w", Version, err)
	}
	if want.Major() != have.Major() || want.Minor() != have.Minor() || want.Patch() != have.Patch() {
		return fmt.Errorf("version %q must match major/minor/patch of default version %q", s, Version)
	}
	Version = s
	return nil
}
