package netnstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ExecLog records the runs of some tools: see RecordExecs.
type ExecLog struct {
	path string
}

// RecordExecs puts, for the rest of the test, a shim for each of tools
// (those installed) first on PATH: it appends its name and arguments to
// the log, then runs the real tool. Code that finds its tools on PATH (as
// exec.Command and exec.LookPath do) runs the shims, so a test can check
// which tools ran, or that none did. It changes the process's PATH: not
// for parallel tests.
func RecordExecs(t testing.TB, tools ...string) *ExecLog {
	t.Helper()
	dir := t.TempDir()
	l := &ExecLog{path: filepath.Join(dir, "log")}
	for _, tool := range tools {
		real, err := exec.LookPath(tool)
		if err != nil {
			continue // not installed: nothing can run it
		}
		shim := "#!/bin/sh\necho \"" + tool + " $*\" >>'" + l.path + "'\nexec '" + real + "' \"$@\"\n"
		if err := os.WriteFile(filepath.Join(dir, tool), []byte(shim), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return l
}

// Take returns the runs recorded since the last Take ("tool args..."),
// oldest first, and forgets them.
func (l *ExecLog) Take(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(l.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(l.path); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// Runs forgets what ran so far, runs fn in ns (an error fails t) and
// returns the tools fn ran.
func (l *ExecLog) Runs(t testing.TB, ns *NS, fn func() error) []string {
	t.Helper()
	l.Take(t)
	if err := ns.Do(fn); err != nil {
		t.Fatal(err)
	}
	return l.Take(t)
}

// ProxyTools are the tools a proxy mode may run: both iptables flavours'
// of both families, nft, ipset, and modprobe (moby/ipvs runs it).
func ProxyTools() []string {
	tools := []string{"nft", "ipset", "modprobe"}
	for _, base := range []string{"iptables", "ip6tables"} {
		for _, flavour := range []string{"", "-nft", "-legacy"} {
			for _, suffix := range []string{"", "-save", "-restore"} {
				tools = append(tools, base+flavour+suffix)
			}
		}
	}
	return tools
}
