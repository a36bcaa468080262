package metrics

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"time"
)

// The z-pages of component-base (KEP-4827/4828, beta and on by default in
// 1.36): /flagz lists the command line's flags, /statusz the start time,
// uptime and versions. Only their text form is served, the one a request
// without an Accept header gets upstream.

const zpageWarning = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.\n"

// zpageDelimiters are picked at random per process, as upstream does, to
// keep scripts from parsing these pages.
var zpageDelimiters = []string{":", ": ", "=", " "}

// ZPages configures /flagz and /statusz.
type ZPages struct {
	// Component names the binary in the page headers ("kube-proxy").
	Component string
	// Flags are the command line's flags, name to current value.
	Flags map[string]string
	// Started is when the process started.
	Started time.Time
	// BinaryVersion and EmulationVersion are what /statusz reports.
	BinaryVersion, EmulationVersion string
	// Paths are the paths the metrics server serves.
	Paths []string
}

func (z *ZPages) install(mux *http.ServeMux) {
	delim := zpageDelimiters[rand.IntN(len(zpageDelimiters))]
	mux.HandleFunc("/flagz", func(w http.ResponseWriter, _ *http.Request) {
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s flagz\n%s\n", z.Component, zpageWarning)
		names := make([]string, 0, len(z.Flags))
		for n := range z.Flags {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(&b, "%s%s%s\n", n, delim, z.Flags[n])
		}
		writeText(w, b.String())
	})
	mux.HandleFunc("/statusz", func(w http.ResponseWriter, _ *http.Request) {
		up := int64(time.Since(z.Started).Seconds())
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s statusz\n%s\n", z.Component, zpageWarning)
		fmt.Fprintf(&b, "Started%s %s\n", delim, z.Started.Format(time.UnixDate))
		fmt.Fprintf(&b, "Up%s %d hr %02d min %02d sec\n", delim, up/3600, (up/60)%60, up%60)
		fmt.Fprintf(&b, "Go version%s %s\n", delim, runtime.Version())
		fmt.Fprintf(&b, "Binary version%s %s\n", delim, z.BinaryVersion)
		if z.EmulationVersion != "" {
			fmt.Fprintf(&b, "Emulation version%s %s\n", delim, z.EmulationVersion)
		}
		fmt.Fprintf(&b, "Paths%s %s\n", delim, strings.Join(z.Paths, " "))
		writeText(w, b.String())
	})
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = fmt.Fprint(w, s)
}
