package app

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	apiversion "k8s.io/apimachinery/pkg/version"
)

// unstampedVersion is Version in a build that did not set it.
const unstampedVersion = "v0.0.0-dev"

// Version is the release, set at build time with -ldflags -X (hack/version.sh
// ldflags gives the flags, from git describe). A build without it, such as
// `go install`, reports the version Go stamped into the module instead.
var Version = unstampedVersion

// gitCommit, gitTreeState and buildDate may be set with -X when the build
// has no VCS information (a container build without .git, hack/image.sh
// building from git archive); otherwise vcs.revision, vcs.modified and
// vcs.time are used.
var gitCommit, gitTreeState, buildDate = "", "", ""

// buildInfo is what --version=raw and `svcproxy version` print.
type buildInfo struct {
	version, commit, treeState, goVersion, buildDate string
}

func readBuildInfo() buildInfo {
	b := buildInfo{version: Version, commit: gitCommit, treeState: gitTreeState, goVersion: runtime.Version(), buildDate: buildDate}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return b.fill(info)
}

// fill completes what -X left unset from Go's build information: the
// module version Go stamps (go install of a tagged version, or a pseudo
// version from the checkout's VCS), the VCS settings, and "unknown".
func (b buildInfo) fill(info *debug.BuildInfo) buildInfo {
	if info != nil {
		b.goVersion = info.GoVersion
		if v := info.Main.Version; b.version == unstampedVersion && v != "" && v != "(devel)" {
			b.version = v
		}
		vcs := map[string]string{}
		for _, s := range info.Settings {
			vcs[s.Key] = s.Value
		}
		b.commit = cmp.Or(b.commit, vcs["vcs.revision"])
		b.treeState = cmp.Or(b.treeState, map[string]string{"true": "dirty", "false": "clean"}[vcs["vcs.modified"]])
		b.buildDate = cmp.Or(b.buildDate, vcs["vcs.time"])
	}
	b.commit = cmp.Or(b.commit, "unknown")
	b.treeState = cmp.Or(b.treeState, "unknown")
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
		_, err := fmt.Fprintf(w, "svcproxy version.Info{GitVersion:%q, GitCommit:%q, GitTreeState:%q, BuildDate:%q, GoVersion:%q, Compiler:%q, Platform:%q}\n",
			b.version, b.commit, b.treeState, b.buildDate, b.goVersion, runtime.Compiler, platform())
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

func platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// info is the build information in the shape of kubectl version's
// clientVersion, for `svcproxy version -o json`.
func (b buildInfo) info() apiversion.Info {
	return apiversion.Info{GitVersion: b.version, GitCommit: b.commit, GitTreeState: b.treeState,
		BuildDate: b.buildDate, GoVersion: b.goVersion, Compiler: runtime.Compiler, Platform: platform()}
}

// newVersionCommand is `svcproxy version`: --version as a subcommand, as
// kubectl and most node tools have it, with a JSON form for scripts.
func newVersionCommand() *cobra.Command {
	output := ""
	cmd := &cobra.Command{
		Use:          "version",
		Short:        "Print svcproxy's version",
		Example:      "  svcproxy version\n  kubectl -n kube-system exec ds/kube-proxy -- svcproxy version -o json",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "":
				return printVersion(cmd.OutOrStdout(), "true")
			case "json":
				return writeIndented(cmd.OutOrStdout(), readBuildInfo().info())
			}
			return fmt.Errorf("--output %q: want json, or nothing for text", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", output, "output format: json (default: text)")
	return cmd
}
