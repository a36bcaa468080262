package contract

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// upstreamKubeProxy is one upstream kube-proxy binary.
type upstreamKubeProxy struct {
	version string // "v1.35.4"
	bin     string
}

// upstreamMinors are the upstream minors the rollback tests run, oldest
// first: the previous ones, each with a module pinned in
// hack/tools/kubernetes-<minor>/ (hack/update-upstream-gomod.sh --previous;
// a node may be rolled back to the kube-proxy it ran before, and their
// layouts differ in details), then the pinned one.
func upstreamMinors(t *testing.T) []string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := filepath.Glob(filepath.Join(root, "hack", "tools", "kubernetes-1.*"))
	if err != nil {
		t.Fatal(err)
	}
	var minors []string
	for _, d := range dirs {
		minors = append(minors, strings.TrimPrefix(filepath.Base(d), "kubernetes-"))
	}
	if len(minors) < 2 {
		t.Fatalf("hack/tools/kubernetes-1.*: %v, want the two minors before the pinned one", minors)
	}
	slices.SortFunc(minors, func(a, b string) int { return minorOf(a) - minorOf(b) })
	pinned := strings.TrimPrefix(binVersion(buildBinaries(t).kubeProxy), "v")
	return append(minors, strings.Join(strings.SplitN(pinned, ".", 3)[:2], "."))
}

// minorOf is Y of "1.Y".
func minorOf(v string) int {
	y, _ := strconv.Atoi(strings.TrimPrefix(v, "1."))
	return y
}

var (
	upstreamsMu sync.Mutex
	upstreams   = map[string]upstreamKubeProxy{}
)

// upstreamFor builds (or finds cached under _output/upstream) upstream
// kube-proxy of minor ("1.35"), the pinned one through buildBinaries. One
// build at a time; a missing binary is a build step, never a skip.
func upstreamFor(t *testing.T, minor string) upstreamKubeProxy {
	t.Helper()
	upstreamsMu.Lock()
	defer upstreamsMu.Unlock()
	if u, ok := upstreams[minor]; ok {
		return u
	}
	bin := buildBinaries(t).kubeProxy
	if !strings.HasPrefix(binVersion(bin), "v"+minor+".") {
		root, err := repoRoot()
		if err == nil {
			bin, err = buildUpstream(root, "--minor", minor, "kube-proxy")
		}
		if err != nil {
			t.Fatalf("building upstream kube-proxy %s: %v", minor, err)
		}
	}
	u := upstreamKubeProxy{version: binVersion(bin), bin: bin}
	upstreams[minor] = u
	return u
}

// binVersion is the Kubernetes version of a binary that
// hack/build-upstream.sh built: its directory is <version>-<hash>.
func binVersion(bin string) string {
	v, _, _ := strings.Cut(filepath.Base(filepath.Dir(bin)), "-")
	return v
}
