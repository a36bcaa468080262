package contract

import (
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
)

// differencesFile is the one place where a difference from upstream is
// allowed, each with its reason.
const differencesFile = "testdata/deliberate-differences.yaml"

// difference is one explained difference. Exactly one of the keys is set:
// Flag (a --help entry), Case (a corpus case), Metric (a /metrics family),
// Endpoint (an HTTP path).
type difference struct {
	Flag     string `json:"flag,omitempty"`
	Case     string `json:"case,omitempty"`
	Metric   string `json:"metric,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Reason   string `json:"reason"`
}

func (d difference) key() string {
	switch {
	case d.Flag != "":
		return "flag " + d.Flag
	case d.Case != "":
		return "case " + d.Case
	case d.Metric != "":
		return "metric " + d.Metric
	default:
		return "endpoint " + d.Endpoint
	}
}

// differences tracks which entries the tests needed, so that an entry for
// a difference that has gone away fails too: the file stays true.
type differences struct {
	mu      sync.Mutex
	entries map[string]difference
	used    map[string]bool
}

func loadDifferences(t *testing.T) *differences {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(differencesFile))
	if err != nil {
		t.Fatal(err)
	}
	var list []difference
	if err := yaml.UnmarshalStrict(data, &list); err != nil {
		t.Fatalf("%s: %v", differencesFile, err)
	}
	d := &differences{entries: map[string]difference{}, used: map[string]bool{}}
	for _, e := range list {
		if e.Reason == "" {
			t.Errorf("%s: %s has no reason", differencesFile, e.key())
		}
		if _, dup := d.entries[e.key()]; dup {
			t.Errorf("%s: %s is listed twice", differencesFile, e.key())
		}
		d.entries[e.key()] = e
	}
	return d
}

// explain reports whether the difference found for key is deliberate, and
// records that the entry was needed.
func (d *differences) explain(key string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.entries[key]
	if ok {
		d.used[key] = true
	}
	return e.Reason, ok
}

// checkUsed fails for every entry with the given kind prefix ("case ",
// "flag ", ...) that no test needed.
func (d *differences) checkUsed(t *testing.T, prefix string) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	var stale []string
	for k := range d.entries {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix && !d.used[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		t.Errorf("%s: %s no longer differs from upstream; remove the entry", differencesFile, k)
	}
}

// report fails the test for found differences under key unless the file
// explains them.
func (d *differences) report(t *testing.T, key string, found []string) {
	t.Helper()
	if len(found) == 0 {
		return
	}
	if reason, ok := d.explain(key); ok {
		t.Logf("deliberate difference (%s): %v", reason, found)
		return
	}
	for _, f := range found {
		t.Errorf("%s: %s", key, f)
	}
}
