package proxytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckGolden compares got with the file at path; with update it first
// rewrites the file (creating its directory). A difference fails t with the
// lines only in one of them.
func CheckGolden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Errorf("dump differs from %s (run with -update to accept):\n%s", path, LineDiff(string(want), got))
	}
}

// LineDiff lists lines only in want ("-") or only in got ("+"); where both
// hold the same lines in another order, it shows both whole.
func LineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	if b.Len() == 0 {
		return "(same lines, different order)\n--- want\n" + want + "--- got\n" + got
	}
	return b.String()
}
