// Command testsummary reads `go test -json` events on stdin and prints what plain
// `go test` prints without -v (package result lines, build errors, and the full output
// of failed tests), then a closing line "N passed, N failed, N skipped" counting every
// test and subtest. It exits 1 if any test, package or build failed, or if the input
// had no package result at all.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
}

type key struct{ pkg, test string }

func main() {
	os.Exit(run(os.Stdin, os.Stdout))
}

func run(in io.Reader, out io.Writer) int {
	w := bufio.NewWriter(out)
	defer w.Flush()

	var passed, failed, skipped, pkgResults int
	anyFail := false
	buf := map[key][]string{} // output of running tests, printed only if they fail

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (e.g. a build error printed by the go command itself).
			fmt.Fprintln(w, string(line))
			continue
		}
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "build-fail":
			anyFail = true
		case "output":
			if e.Test == "" {
				// Package-level output: "ok", "FAIL", "?", panics outside tests, coverage.
				if !strings.HasPrefix(e.Output, "=== ") && e.Output != "PASS\n" {
					fmt.Fprint(w, e.Output)
				}
				continue
			}
			k := key{e.Package, e.Test}
			buf[k] = append(buf[k], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				pkgResults++
				if e.Action == "fail" {
					anyFail = true
				}
				continue
			}
			k := key{e.Package, e.Test}
			switch e.Action {
			case "pass":
				passed++
			case "skip":
				skipped++
			case "fail":
				failed++
				anyFail = true
				for _, l := range buf[k] {
					fmt.Fprint(w, l)
				}
			}
			delete(buf, k)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(w, "testsummary: reading input: %v\n", err)
		anyFail = true
	}
	// Tests that never finished (a crash or timeout in the package): show their output.
	for k, lines := range buf {
		fmt.Fprintf(w, "--- (unfinished) %s %s\n", k.pkg, k.test)
		for _, l := range lines {
			fmt.Fprint(w, l)
		}
		anyFail = true
	}
	if pkgResults == 0 {
		fmt.Fprintln(w, "testsummary: no package results in the input")
		anyFail = true
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if anyFail {
		return 1
	}
	return 0
}
