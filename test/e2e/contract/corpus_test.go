package contract

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
)

// corpusCase is one entry of testdata/corpus.yaml (see its header).
type corpusCase struct {
	Name          string   `json:"name"`
	Args          []string `json:"args,omitempty"`
	Config        *string  `json:"config,omitempty"`
	Raw           bool     `json:"raw,omitempty"`
	MissingConfig bool     `json:"missingConfig,omitempty"`
}

const configHeader = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

func loadCorpus(t *testing.T) []corpusCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "corpus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []corpusCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		t.Fatalf("corpus.yaml: %v", err)
	}
	if len(cases) < 150 {
		t.Fatalf("corpus.yaml has %d cases; the suite needs at least 150", len(cases))
	}
	return cases
}

// TestCorpus runs every case against both binaries with --write-config-to
// (validation, then the written file) and, for flag-only cases, with
// --cleanup (the runtime path, where the deprecated port flags apply).
func TestCorpus(t *testing.T) {
	b := buildBinaries(t)
	ns := newNetns(t)
	diffs := loadDifferences(t)
	var tally tally
	// The cases run in parallel (-parallel, GOMAXPROCS by default): most of
	// the time goes into starting the two binaries. The group returns when
	// every case has finished.
	t.Run("cases", func(t *testing.T) {
		for _, c := range loadCorpus(t) {
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				var found []string
				found = append(found, compareWrite(t, ns, b, c, &tally)...)
				if c.Config == nil && !c.MissingConfig {
					found = append(found, compareCleanup(t, ns, b, c, &tally)...)
				}
				diffs.report(t, "case "+c.Name, found)
			})
		}
	})
	diffs.checkUsed(t, "case ")
	// A corpus where everything is rejected (a broken run) would compare
	// equal too: both outcomes must be well represented.
	t.Logf("upstream accepted %d and rejected %d cases (%d written files compared); --cleanup accepted %d",
		tally.accepted, tally.rejected, tally.written, tally.cleanupAccepted)
	if tally.accepted < 50 || tally.rejected < 50 || tally.written < 50 || tally.cleanupAccepted < 50 {
		t.Errorf("too few accepted (%d), rejected (%d) or written (%d) cases for a meaningful comparison",
			tally.accepted, tally.rejected, tally.written)
	}
}

// tally counts upstream's outcomes over the corpus.
type tally struct {
	mu                                           sync.Mutex
	accepted, rejected, written, cleanupAccepted int
}

// add counts one outcome under the lock (the cases run in parallel).
func (tl *tally) add(field *int) {
	tl.mu.Lock()
	*field++
	tl.mu.Unlock()
}

// invocation is one binary's outcome for one case.
type invocation struct {
	res     result
	written map[string]any
}

func (inv invocation) accepted() bool { return inv.res.code == 0 }

// runCase runs bin for c in a fresh directory, with extra arguments.
func runCase(t *testing.T, ns, bin string, c corpusCase, extra ...string) invocation {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{}, c.Args...)
	if c.Config != nil {
		body := *c.Config
		if !c.Raw {
			body = configHeader + body
		}
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config="+filepath.Join(dir, "config.yaml"))
	}
	if c.MissingConfig {
		args = append(args, "--config="+filepath.Join(dir, "missing.yaml"))
	}
	args = append(args, extra...)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$DIR", dir)
	}
	res, err := runIn(ns, dir, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	inv := invocation{res: res}
	if data, err := os.ReadFile(filepath.Join(dir, "written.yaml")); err == nil && res.code == 0 {
		if err := yaml.Unmarshal(data, &inv.written); err != nil {
			t.Fatalf("%s wrote unparsable YAML: %v\n%s", bin, err, data)
		}
	}
	return inv
}

func compareWrite(t *testing.T, ns string, b binaries, c corpusCase, tl *tally) []string {
	up := runCase(t, ns, b.kubeProxy, c, "--write-config-to=$DIR/written.yaml")
	ours := runCase(t, ns, b.svcproxy, c, "--write-config-to=$DIR/written.yaml")
	found := compareOutcome("--write-config-to", up, ours)
	t.Logf("--write-config-to: upstream exit %d naming %v, svcproxy exit %d naming %v",
		up.res.code, namedIn(up.res.output()), ours.res.code, namedIn(ours.res.output()))
	if !up.accepted() {
		tl.add(&tl.rejected)
		return found
	}
	tl.add(&tl.accepted)
	if len(up.written) > 0 {
		tl.add(&tl.written)
	}
	if ours.accepted() {
		for _, d := range diffValues("", up.written, ours.written) {
			found = append(found, "--write-config-to output: "+d)
		}
	}
	return found
}

func compareCleanup(t *testing.T, ns string, b binaries, c corpusCase, tl *tally) []string {
	up := runCase(t, ns, b.kubeProxy, c, "--cleanup")
	ours := runCase(t, ns, b.svcproxy, c, "--cleanup")
	t.Logf("--cleanup: upstream exit %d naming %v, svcproxy exit %d naming %v",
		up.res.code, namedIn(up.res.output()), ours.res.code, namedIn(ours.res.output()))
	if up.accepted() {
		tl.add(&tl.cleanupAccepted)
	}
	return compareOutcome("--cleanup", up, ours)
}

// compareOutcome compares accept/reject and, for two rejections, the
// fields and flags the errors name.
func compareOutcome(how string, up, ours invocation) []string {
	switch {
	case up.accepted() && !ours.accepted():
		return []string{fmt.Sprintf("%s: upstream accepts, svcproxy rejects: %s", how, lastLines(ours.res.output()))}
	case !up.accepted() && ours.accepted():
		return []string{fmt.Sprintf("%s: upstream rejects (%s), svcproxy accepts", how, lastLines(up.res.output()))}
	case !up.accepted():
		u, o := namedIn(up.res.output()), namedIn(ours.res.output())
		if !reflect.DeepEqual(u, o) {
			return []string{fmt.Sprintf("%s: both reject, upstream naming %v (%s), svcproxy naming %v (%s)",
				how, u, lastLines(up.res.output()), o, lastLines(ours.res.output()))}
		}
	}
	return nil
}

// named are the patterns that pick the subject of an error: a config field
// path as upstream's validation prints it, a flag, a feature gate, an
// unknown field of the file.
var named = []*regexp.Regexp{
	regexp.MustCompile(`KubeProxyConfiguration(?:\.[A-Za-z]+|\[\d+\])+`),
	regexp.MustCompile(`"(--[a-z0-9_-]+)" flag`),
	regexp.MustCompile(`unknown (?:shorthand )?flag: '?(-[-a-z0-9_]+|[a-z])'?`),
	regexp.MustCompile(`feature gate:? "?([A-Z][A-Za-z0-9]+)`),
	regexp.MustCompile(`unknown field "([^"]+)"`),
}

func namedIn(out string) []string {
	set := map[string]bool{}
	for _, re := range named {
		for _, m := range re.FindAllStringSubmatch(out, -1) {
			set[m[len(m)-1]] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// lastLines is the tail of an output, for messages.
func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}

// diffValues lists the paths where two decoded YAML documents differ.
func diffValues(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		var out []string
		for k := range keys {
			out = append(out, diffValues(path+"."+k, am[k], bm[k])...)
		}
		sort.Strings(out)
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	return []string{fmt.Sprintf("%s: upstream %s, svcproxy %s", strings.TrimPrefix(path, "."), aj, bj)}
}
