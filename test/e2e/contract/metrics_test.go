package contract

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// family is what /metrics says about one metric family.
type family struct {
	typ, help string
	labels    []string // label names, "le" and "quantile" excluded
	buckets   []string // histogram "le" values
}

func (f family) String() string {
	return fmt.Sprintf("%s labels=%v buckets=%v help=%q", f.typ, f.labels, f.buckets, f.help)
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// parseMetrics reads the text exposition format into families.
func parseMetrics(text string) map[string]family {
	fams := map[string]family{}
	labels := map[string]map[string]bool{}
	buckets := map[string]map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP "):
			name, help, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			f := fams[name]
			f.help = help
			fams[name] = f
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, _ := strings.Cut(strings.TrimPrefix(line, "# TYPE "), " ")
			f := fams[name]
			f.typ = typ
			fams[name] = f
		case line != "" && !strings.HasPrefix(line, "#"):
			m := sampleLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			name := familyOf(fams, m[1])
			if labels[name] == nil {
				labels[name], buckets[name] = map[string]bool{}, map[string]bool{}
			}
			for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
				switch p[1] {
				case "le":
					buckets[name][p[2]] = true
				case "quantile":
				default:
					labels[name][p[1]] = true
				}
			}
		}
	}
	for name, f := range fams {
		f.labels, f.buckets = sortedKeys(labels[name]), sortedKeys(buckets[name])
		fams[name] = f
	}
	return fams
}

// familyOf maps a sample name to its family (histogram and summary
// samples carry suffixes).
func familyOf(fams map[string]family, sample string) string {
	if _, ok := fams[sample]; ok {
		return sample
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base := strings.TrimSuffix(sample, suffix); base != sample {
			if _, ok := fams[base]; ok {
				return base
			}
		}
	}
	return sample
}

// compareMetrics compares every family's type, help, label names and
// buckets after both proxies synced the same Services.
func compareMetrics(t *testing.T, c *F.Cluster, up, ours *F.Node, diffs *differences) {
	upText, err := c.Metrics(up)
	if err != nil {
		t.Fatalf("upstream /metrics: %v", err)
	}
	ourText, err := c.Metrics(ours)
	if err != nil {
		t.Fatalf("svcproxy /metrics: %v", err)
	}
	u, o := parseMetrics(upText), parseMetrics(ourText)
	if len(u) < 20 || u["kubeproxy_sync_proxy_rules_duration_seconds"].typ != "histogram" {
		t.Fatalf("upstream /metrics has %d families, no sync histogram: not after a sync?\n%s", len(u), upText)
	}
	t.Logf("comparing %d upstream and %d svcproxy families", len(u), len(o))
	names := map[string]bool{}
	for n := range u {
		names[n] = true
	}
	for n := range o {
		names[n] = true
	}
	all := sortedKeys(names)
	sort.Strings(all)
	for _, n := range all {
		uf, uok := u[n]
		of, ook := o[n]
		var found []string
		switch {
		case !ook:
			found = []string{"missing from svcproxy: " + uf.String()}
		case !uok:
			found = []string{"not in upstream: " + of.String()}
		case uf.String() != of.String():
			found = []string{fmt.Sprintf("upstream %s; svcproxy %s", uf, of)}
		}
		diffs.report(t, "metric "+n, found)
	}
}
