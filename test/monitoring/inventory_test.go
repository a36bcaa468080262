package monitoring

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// family is one line of testdata/metrics.txt.
type family struct {
	typ    string // counter, gauge, histogram, summary
	labels []string
	modes  string
}

// inventory is every family svcproxy serves, by name.
type inventory map[string]family

// scrapeFamilies are the series Prometheus makes for each target itself.
var scrapeFamilies = inventory{
	"up":                                    {typ: "gauge"},
	"scrape_duration_seconds":               {typ: "gauge"},
	"scrape_samples_scraped":                {typ: "gauge"},
	"scrape_series_added":                   {typ: "gauge"},
	"scrape_samples_post_metric_relabeling": {typ: "gauge"},
}

// targetLabels are added by the scrape (service discovery, relabelling,
// external labels), not by svcproxy; any query may use them.
var targetLabels = []string{"job", "instance", "node", "namespace", "pod", "service", "endpoint", "container", "cluster"}

func loadInventory(t *testing.T) inventory {
	t.Helper()
	f, err := os.Open("testdata/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inv := inventory{}
	for k, v := range scrapeFamilies {
		inv[k] = v
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 4 {
			t.Fatalf("testdata/metrics.txt: %q: want name, type, labels, modes", line)
		}
		fam := family{typ: fields[1], modes: fields[3]}
		if fields[2] != "-" {
			fam.labels = strings.Split(fields[2], ",")
		}
		inv[fields[0]] = fam
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(inv) < 50 {
		t.Fatalf("testdata/metrics.txt lists %d families: regenerate it (internal/app TestMetricsInventory -update)", len(inv))
	}
	return inv
}

// series is what a selector's metric name resolves to: its family and,
// for a histogram or summary, which of its series.
type series struct {
	name   string
	family family
	suffix string // "", "_bucket", "_count", "_sum"
}

// lookup resolves a selected metric name to its family.
func (inv inventory) lookup(name string) (series, bool) {
	if f, ok := inv[name]; ok {
		return series{name: name, family: f}, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f, ok := inv[base]
		if ok && (f.typ == "histogram" || f.typ == "summary" && suffix != "_bucket") {
			return series{name: base, family: f, suffix: suffix}, true
		}
	}
	return series{}, false
}

// hasLabel tells whether the series carry label (their own, or the
// scrape's).
func (s series) hasLabel(label string) bool {
	switch {
	case contains(s.family.labels, label), contains(targetLabels, label):
		return true
	case label == "le":
		return s.suffix == "_bucket"
	case label == "quantile":
		return s.family.typ == "summary" && s.suffix == ""
	}
	return false
}

// counting tells whether the series only grow: a counter, or the buckets,
// count and sum of a histogram or summary.
func (s series) counting() bool {
	return s.family.typ == "counter" || s.suffix != ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
