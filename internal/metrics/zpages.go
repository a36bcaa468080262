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
// uptime and versions. Both in text (no Accept header) and structured
// (JSON or YAML, kinds Flagz and Statusz of config.k8s.io v1beta1 and the
// deprecated v1alpha1), negotiated as upstream (znegotiate.go).

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
	mux.HandleFunc("/flagz", zpageHandler("Flagz", func() string { return z.flagzText(delim) }, func() (*typeMeta, any) {
		page := &struct {
			typeMeta
			Metadata objectMeta        `json:"metadata"`
			Flags    map[string]string `json:"flags,omitempty"`
		}{typeMeta: typeMeta{Kind: "Flagz"}, Metadata: objectMeta{Name: z.Component}, Flags: z.Flags}
		return &page.typeMeta, page
	}))
	mux.HandleFunc("/statusz", zpageHandler("Statusz", func() string { return z.statuszText(delim) }, func() (*typeMeta, any) {
		page := &struct {
			typeMeta
			Metadata         objectMeta `json:"metadata"`
			StartTime        string     `json:"startTime"`
			UptimeSeconds    int64      `json:"uptimeSeconds"`
			GoVersion        string     `json:"goVersion"`
			BinaryVersion    string     `json:"binaryVersion"`
			EmulationVersion string     `json:"emulationVersion,omitempty"`
			Paths            []string   `json:"paths"`
		}{typeMeta: typeMeta{Kind: "Statusz"}, Metadata: objectMeta{Name: z.Component},
			StartTime: z.Started.UTC().Format(time.RFC3339), UptimeSeconds: int64(time.Since(z.Started).Seconds()),
			GoVersion: runtime.Version(), BinaryVersion: z.BinaryVersion, EmulationVersion: z.EmulationVersion, Paths: z.Paths}
		return &page.typeMeta, page
	}))
}

// zpageHandler serves one z-page: text, the structured object (whose
// Kind and APIVersion header structured returns, to be completed) or 406.
func zpageHandler(kind string, text func() string, structured func() (*typeMeta, any)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, ok := negotiateZPage(r, kind, true)
		switch {
		case !ok:
			notAcceptable(w, r)
		case m.version != "":
			header, obj := structured()
			writeStructured(w, m, strings.ToLower(kind), header, obj)
		default:
			writeText(w, text())
		}
	}
}

// flagzText is the text page: the flags sorted by name.
func (z *ZPages) flagzText(delim string) string {
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
	return b.String()
}

// statuszText is the text page: start, uptime, versions, paths.
func (z *ZPages) statuszText(delim string) string {
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
	return b.String()
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = fmt.Fprint(w, s)
}
