package contract

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// helpFlag is what --help says about one flag.
type helpFlag struct {
	shorthand, typ, def string
}

var (
	// A flag line: "  -v, --v Level   usage" or "      --cleanup   usage".
	flagLine = regexp.MustCompile(`^\s{2,6}(?:-([A-Za-z]), )?--([A-Za-z0-9_-]+)(?: (\S+))?(?:\s{2,}(.*))?$`)
	// pflag ends the usage with the default when it is not the zero value.
	defaultSuffix = regexp.MustCompile(`\(default (.*)\)\s*$`)
)

// parseHelp reads pflag's flag listing into name → flag.
func parseHelp(out string) map[string]helpFlag {
	flags := map[string]helpFlag{}
	var name string
	var f helpFlag
	var usage []string
	flush := func() {
		if name == "" {
			return
		}
		if m := defaultSuffix.FindStringSubmatch(strings.Join(usage, " ")); m != nil {
			f.def = m[1]
		}
		flags[name] = f
	}
	for _, line := range strings.Split(out, "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flush()
			name, f, usage = m[2], helpFlag{shorthand: m[1], typ: m[3]}, []string{m[4]}
			continue
		}
		if strings.TrimSpace(line) == "" || !strings.HasPrefix(line, " ") {
			flush()
			name = ""
			continue
		}
		usage = append(usage, strings.TrimSpace(line))
	}
	flush()
	return flags
}

// TestHelp compares every flag's name, shorthand, type and default.
func TestHelp(t *testing.T) {
	b := buildBinaries(t)
	ns := newNetns(t)
	diffs := loadDifferences(t)
	dir := t.TempDir()
	up, err := runIn(ns, dir, b.kubeProxy, "--help")
	if err != nil {
		t.Fatal(err)
	}
	ours, err := runIn(ns, dir, b.svcproxy, "--help")
	if err != nil {
		t.Fatal(err)
	}
	upFlags, ourFlags := parseHelp(up.output()), parseHelp(ours.output())
	if len(upFlags) < 50 || len(ourFlags) < 50 {
		t.Fatalf("parsed %d upstream and %d svcproxy flags; the help format was not understood:\n%s", len(upFlags), len(ourFlags), up.output())
	}
	names := map[string]bool{}
	for n := range upFlags {
		names[n] = true
	}
	for n := range ourFlags {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		diffs.report(t, "flag "+n, compareFlag(upFlags, ourFlags, n))
	}
	diffs.checkUsed(t, "flag ")
}

func compareFlag(up, ours map[string]helpFlag, name string) []string {
	u, uok := up[name]
	o, ook := ours[name]
	switch {
	case !ook:
		return []string{fmt.Sprintf("--%s (%s, default %q) is missing from svcproxy", name, u.typ, u.def)}
	case !uok:
		return []string{fmt.Sprintf("--%s is not an upstream flag", name)}
	case u != o:
		return []string{fmt.Sprintf("--%s: upstream %+v, svcproxy %+v", name, u, o)}
	}
	return nil
}
