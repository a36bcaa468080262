package debugstate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// HandlerOptions configures Handler.
type HandlerOptions struct {
	// Mode is the proxy mode, sent in the Dump.
	Mode string
}

// Handler serves the recorded States as a Dump. ?family=IPv4 or IPv6
// restricts it to one family. Who may ask is the server's business: the
// daemon serves it on a socket only root can open (internal/localapi).
func (r *Recorder) Handler(o HandlerOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "only GET is allowed", http.StatusMethodNotAllowed)
			return
		}
		want := proxy.IPFamily(req.URL.Query().Get("family"))
		if want != "" && !slices.Contains(proxy.Families, want) {
			http.Error(w, "family must be IPv4 or IPv6", http.StatusBadRequest)
			return
		}
		var states []*recorded
		for _, f := range proxy.Families {
			if s, at := r.Latest(f); s != nil && (want == "" || want == f) {
				states = append(states, &recorded{state: s, at: at})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		if req.Method == http.MethodHead {
			return
		}
		// An error here is the client going away: nothing to tell it.
		_ = writeDump(w, o.Mode, states)
	})
}

// writeDump writes the Dump of states to w as it encodes it, one service
// port per Write (and per line), so that a request costs the daemon one
// service port's encoding at a time, not a copy of the whole state: the
// state lists every Service and endpoint of the cluster.
func writeDump(w io.Writer, mode string, states []*recorded) error {
	ew := &errWriter{w: w}
	m, err := json.Marshal(mode)
	if err != nil {
		return err
	}
	ew.printf(`{"mode":%s,"states":[`, m)
	for i, rec := range states {
		if i > 0 {
			ew.printf(",")
		}
		if err := writeState(ew, rec.state, rec.at); err != nil {
			return err
		}
	}
	ew.printf("]}\n")
	return ew.err
}

// servicesTail is how the JSON of a State without service ports ends:
// Services is its last field.
const servicesTail = `"services":[]}`

// writeState writes one State in its wire form: the object without its
// service ports, then each service port as it is encoded.
func writeState(ew *errWriter, s *desired.State, at time.Time) error {
	head, err := json.Marshal(encodeHead(s, at))
	if err != nil {
		return err
	}
	if !bytes.HasSuffix(head, []byte(servicesTail)) {
		return fmt.Errorf("the wire State does not end with its services: %s", head)
	}
	ew.write(head[:len(head)-len("]}")])
	enc := json.NewEncoder(ew)
	for i, name := range sortedNames(s) {
		if ew.err != nil {
			return ew.err
		}
		if i > 0 {
			ew.printf(",")
		}
		// Encode writes the port and a newline in one Write.
		if err := enc.Encode(EncodePort(s.Service(name))); err != nil {
			return err
		}
	}
	ew.printf("]}")
	return ew.err
}

// errWriter keeps the first write error and skips writing after it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	e.write(p)
	if e.err != nil {
		return 0, e.err
	}
	return len(p), nil
}

func (e *errWriter) write(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
