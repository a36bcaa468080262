package debugstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// bigState is a State of n service ports with 10 endpoints each.
func bigState(n int) *desired.State {
	ports := make(map[proxy.ServicePortName]*desired.ServicePort, n)
	for i := range n {
		sp := name("ns", fmt.Sprintf("svc-%05d", i), "http", proxy.TCP)
		var eps []desired.Endpoint
		for j := range 10 {
			eps = append(eps, desired.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(j)}), Port: 8080})
		}
		d := desired.Dispatch{Endpoints: eps}
		ports[sp] = &desired.ServicePort{Name: sp, Protocol: proxy.TCP, Port: 80,
			ClusterIP: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Internal: d, External: d, Cluster: d}
	}
	return &desired.State{Family: proxy.IPv4, Services: model.NewPortMap(ports)}
}

// writeRecorder is a ResponseWriter that keeps the body and the size of
// its largest single Write.
type writeRecorder struct {
	*httptest.ResponseRecorder
	largest, writes int
}

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.largest, w.writes = max(w.largest, len(p)), w.writes+1
	return w.ResponseRecorder.Write(p)
}

// TestHandlerStreams: the state is written to the client as it is encoded,
// one service port at a time, not built in memory first: a daemon with
// thousands of Services must not hold a copy of their JSON per request.
func TestHandlerStreams(t *testing.T) {
	const services = 3000
	r := NewRecorder()
	at := time.Unix(1000, 0).UTC()
	r.now = func() time.Time { return at }
	st := bigState(services)
	r.Record(st, model.Changes{})
	w := &writeRecorder{ResponseRecorder: httptest.NewRecorder()}
	r.Handler(HandlerOptions{Mode: "iptables"}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET: %d %s", w.Code, w.Body)
	}
	body := w.Body.Len()
	if limit := 16 << 10; w.largest > limit {
		t.Errorf("largest single Write %d bytes of a %d-byte body (%d writes): the state is built in memory, want each Write ≤ %d",
			w.largest, body, w.writes, limit)
	}
	var d Dump
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatalf("streamed body is not JSON: %v", err)
	}
	want, _ := json.Marshal(Dump{Mode: "iptables", States: []State{Encode(st, at)}})
	got, _ := json.Marshal(d)
	if string(got) != string(want) {
		t.Errorf("streamed dump differs from Encode's (%d vs %d bytes)", len(got), len(want))
	}
}

// failingWriter fails every Write after the first n.
type failingWriter struct{ n, calls int }

func (w *failingWriter) Write(p []byte) (int, error) {
	w.calls++
	if w.calls > w.n {
		return 0, io.ErrClosedPipe
	}
	return len(p), nil
}

// TestWriteDumpStopsWhenTheClientIsGone: once a write fails, encoding
// stops instead of running through every remaining service port.
func TestWriteDumpStopsWhenTheClientIsGone(t *testing.T) {
	w := &failingWriter{n: 3}
	err := writeDump(w, "nftables", []*recorded{{state: bigState(1000)}})
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("writeDump = %v, want the write error", err)
	}
	if w.calls != w.n+1 {
		t.Errorf("%d writes after the first failure, want none", w.calls-w.n-1)
	}
}
