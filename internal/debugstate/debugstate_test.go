package debugstate

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func name(ns, svc, port string, proto proxy.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: ns, Name: svc}, Port: port, Protocol: proto}
}

func ep(s string) desired.Endpoint {
	ap := netip.MustParseAddrPort(s)
	return desired.Endpoint{IP: ap.Addr(), Port: ap.Port()}
}

// sampleState exercises every field, including the nil/empty difference of
// AllowedSources.
func sampleState() *desired.State {
	web := name("default", "web", "http", proxy.TCP)
	dns := name("kube-system", "dns", "", proxy.UDP)
	masq := desired.Masquerade{Mark: 0x4000, Local: desired.LocalDetector{
		Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}}
	webRoutes := desired.DecideRoutes(masq, true)
	return &desired.State{
		Family:  proxy.IPv4,
		NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")},
		NodePorts: desired.NodePortAddrs{IPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")},
			Localhost: desired.LocalhostProxied, Bound: []netip.Addr{netip.MustParseAddr("192.168.0.10")}},
		Masquerade:     masq,
		ServiceCIDRs:   []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		Peers:          []netip.Addr{netip.MustParseAddr("192.168.0.11")},
		ClusterSources: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("192.168.0.11/32")},
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{
			web: {Name: web, Protocol: proxy.TCP, Port: 80, ClusterIP: netip.MustParseAddr("10.96.0.10"),
				NodePort: 30080, LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("203.0.113.5")},
				ExternalIPs:     []netip.Addr{netip.MustParseAddr("198.51.100.7")},
				Routes:          &webRoutes,
				AllowedSources:  []netip.Prefix{},
				AffinitySeconds: 10800,
				Internal:        desired.Dispatch{Endpoints: []desired.Endpoint{ep("10.244.1.2:8080"), ep("10.244.2.2:8080")}},
				External:        desired.Dispatch{Empty: desired.Drop},
				Cluster:         desired.Dispatch{Endpoints: []desired.Endpoint{ep("10.244.1.2:8080")}},
				InternalLocal:   true, ExternalLocal: true, HealthCheckNodePort: 31000,
				Setting: &desired.PortSetting{Value: "rr", Refused: "fastest"}, ExternalBalancing: proxy.BalanceMaglev,
				ExternalForwarding: proxy.ForwardDSR, DSR: &desired.DSR{
					Tunnels: []desired.Tunnel{{Endpoint: netip.MustParseAddr("10.244.2.2"), Node: netip.MustParseAddr("192.168.0.11"), NodeName: "node-2"}},
					In:      desired.Dispatch{Endpoints: []desired.Endpoint{ep("10.244.1.2:8080")}}}},
			dns: {Name: dns, Protocol: proxy.UDP, Port: 53, ClusterIP: netip.MustParseAddr("10.96.0.53"),
				Internal: desired.Dispatch{Empty: desired.Reject}, External: desired.Dispatch{Empty: desired.Reject},
				Cluster: desired.Dispatch{Empty: desired.Reject}},
		}),
		HealthChecks: []desired.HealthCheck{{Service: web.ServiceName, Port: 31000, LocalReady: 1}},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	in := sampleState()
	at := time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)
	body, err := json.Marshal(Encode(in, at))
	if err != nil {
		t.Fatal(err)
	}
	var w State
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatal(err)
	}
	out, err := w.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if !w.SyncedAt.Equal(at) {
		t.Errorf("syncedAt = %v, want %v", w.SyncedAt, at)
	}
	// Endpoint slices may come back empty instead of nil: compare ports with
	// desired's own equality, the rest with DeepEqual.
	for n, sp := range in.Services.All() {
		got := out.Service(n)
		if got == nil || !sp.Equal(got) {
			t.Errorf("%s: round trip changed the port:\n in  %+v\n out %+v", n, sp, got)
		}
	}
	if out.Services.Len() != in.Services.Len() {
		t.Errorf("%d services after the round trip, want %d", out.Services.Len(), in.Services.Len())
	}
	if out.Service(name("default", "web", "http", proxy.TCP)).AllowedSources == nil {
		t.Error("an empty AllowedSources became nil (unrestricted)")
	}
	if out.Service(name("kube-system", "dns", "", proxy.UDP)).AllowedSources != nil {
		t.Error("a nil AllowedSources became non-nil (restricted)")
	}
	in.Services, out.Services = model.PortMap[*desired.ServicePort]{}, model.PortMap[*desired.ServicePort]{}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("state round trip:\n in  %+v\n out %+v", in, out)
	}
}

// TestSampleCoversEveryField keeps the wire form complete: the sample's web
// port sets every field of desired.ServicePort, so a field added there and
// not carried by ServicePort makes the round trip above fail. Before the
// wire carried InternalLocal, explain guessed it from the endpoints.
func TestSampleCoversEveryField(t *testing.T) {
	st := reflect.ValueOf(*sampleState())
	for i := range st.NumField() {
		f := st.Type().Field(i)
		// Lost explains Events and Changed one sync: neither is about
		// what is programmed, so neither is on the wire.
		if f.IsExported() && f.Name != "Lost" && f.Name != "Changed" && st.Field(i).IsZero() {
			t.Errorf("sampleState leaves desired.State.%s zero: set it, and carry it on the wire", f.Name)
		}
	}
	np := reflect.ValueOf(sampleState().NodePorts)
	for i := range np.NumField() {
		// All and IPs exclude each other; the sample lists IPs.
		if f := np.Type().Field(i); f.IsExported() && f.Name != "All" && np.Field(i).IsZero() {
			t.Errorf("sampleState leaves desired.NodePortAddrs.%s zero: set it, and carry it on the wire", f.Name)
		}
	}
	web := sampleState().Service(name("default", "web", "http", proxy.TCP))
	v := reflect.ValueOf(*web)
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() && v.Field(i).IsZero() {
			t.Errorf("sampleState's web port leaves desired.ServicePort.%s zero: set it, and carry it on the wire", f.Name)
		}
	}
}

// TestDecodeWithoutRoutes: a dump from a daemon that did not carry routes
// decodes with them undecided, and State.RoutesOf decides them.
func TestDecodeWithoutRoutes(t *testing.T) {
	in := sampleState()
	w := Encode(in, time.Time{})
	for i := range w.Services {
		w.Services[i].Routes = nil
	}
	out, err := w.Decode()
	if err != nil {
		t.Fatal(err)
	}
	n := name("default", "web", "http", proxy.TCP)
	if got, want := out.RoutesOf(out.Service(n)), *in.Service(n).Routes; got != want {
		t.Errorf("routes = %v, want %v", got, want)
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	if _, err := (State{Family: "IPv5"}).Decode(); err == nil {
		t.Error("unknown family accepted")
	}
	bad := State{Family: proxy.IPv4, Services: []ServicePort{{Name: "x", Internal: Dispatch{Empty: "MAYBE"}}}}
	if _, err := bad.Decode(); err == nil {
		t.Error("unknown verdict accepted")
	}
	w := Encode(sampleState(), time.Time{})
	w.Services[0].Routes.External.Pod.Why = "because"
	if _, err := w.Decode(); err == nil {
		t.Error("unknown route reason accepted")
	}
	w = Encode(sampleState(), time.Time{})
	w.NodePorts.Localhost = "maybe"
	if _, err := w.Decode(); err == nil {
		t.Error("unknown localhost decision accepted")
	}
	w = Encode(sampleState(), time.Time{})
	w.Services[0].ExternalBalancing = "ring-hash"
	if _, err := w.Decode(); err == nil {
		t.Error("unknown balancing accepted")
	}
	w = Encode(sampleState(), time.Time{})
	w.Services[0].ExternalForwarding = "ipip"
	if _, err := w.Decode(); err == nil {
		t.Error("unknown forwarding accepted")
	}
	w = Encode(sampleState(), time.Time{})
	w.Services[0].DSR.In.Empty = "MAYBE"
	if _, err := w.Decode(); err == nil {
		t.Error("unknown verdict of a DSR accepted")
	}
}

// TestDecodeWithoutBalancing: an older daemon's dump has no balancing;
// it reads as no decision (random, as that daemon balanced).
func TestDecodeWithoutBalancing(t *testing.T) {
	w := Encode(sampleState(), time.Time{})
	for i := range w.Services {
		w.Services[i].ExternalBalancing = ""
	}
	out, err := w.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Service(name("default", "web", "http", proxy.TCP)).ExternalBalancing; got != proxy.BalanceDefault {
		t.Errorf("balancing = %q, want none", got)
	}
}

// TestDecodeWithoutDSR: an older daemon's dump has no forwarding, DSR or
// peers; it reads as no decision (snat, as that daemon forwarded) and no
// DSR.
func TestDecodeWithoutDSR(t *testing.T) {
	w := Encode(sampleState(), time.Time{})
	w.Peers, w.ClusterSources = nil, nil
	for i := range w.Services {
		w.Services[i].ExternalForwarding, w.Services[i].DSR = "", nil
	}
	body, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(body); strings.Contains(s, "externalForwarding") || strings.Contains(s, `"dsr"`) || strings.Contains(s, `"peers"`) ||
		strings.Contains(s, "clusterSources") {
		t.Errorf("absent fields are written: %s", s)
	}
	out, err := w.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if sp := out.Service(name("default", "web", "http", proxy.TCP)); sp.ExternalForwarding != proxy.ForwardDefault || sp.DSR != nil || out.Peers != nil ||
		out.ClusterSources != nil {
		t.Errorf("forwarding %q, DSR %+v, peers %v, cluster sources %v; want none", sp.ExternalForwarding, sp.DSR, out.Peers,
			out.ClusterSources)
	}
}

func TestRecorderAndHandler(t *testing.T) {
	r := NewRecorder()
	r.now = func() time.Time { return time.Unix(1000, 0) }
	h := r.Handler(HandlerOptions{Mode: "nftables"})
	if d := get(t, h, Path, http.StatusOK); len(d.States) != 0 || d.Mode != "nftables" {
		t.Errorf("before any sync: %+v", d)
	}
	r.Record(sampleState(), model.Changes{})
	v6 := &desired.State{Family: proxy.IPv6}
	r.Record(v6, model.Changes{})
	r.Record(nil, model.Changes{}) // ignored
	if s, at := r.Latest(proxy.IPv6); s != v6 || !at.Equal(time.Unix(1000, 0)) {
		t.Errorf("Latest(IPv6) = %p %v", s, at)
	}
	d := get(t, h, Path, http.StatusOK)
	if len(d.States) != 2 || d.States[0].Family != proxy.IPv4 || len(d.States[0].Services) != 2 || d.Mode != "nftables" {
		t.Fatalf("dump = %+v", d)
	}
	if d := get(t, h, Path+"?family=IPv6", http.StatusOK); len(d.States) != 1 || d.States[0].Family != proxy.IPv6 {
		t.Errorf("?family=IPv6: %+v", d)
	}
	get(t, h, Path+"?family=IPX", http.StatusBadRequest)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, strings.NewReader("x")))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, Path, nil))
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("HEAD: %d with %d bytes", rec.Code, rec.Body.Len())
	}
}

func get(t *testing.T, h http.Handler, target string, want int) Dump {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != want {
		t.Fatalf("GET %s: %d %s, want %d", target, rec.Code, rec.Body, want)
	}
	var d Dump
	if want == http.StatusOK {
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestThen(t *testing.T) {
	r := NewRecorder()
	var got *desired.State
	st := &desired.State{Family: proxy.IPv4}
	r.Then(func(s *desired.State, _ model.Changes) { got = s })(st, model.Changes{})
	if latest, _ := r.Latest(proxy.IPv4); latest != st || got != st {
		t.Errorf("Then: recorded %p, next saw %p, want %p", latest, got, st)
	}
	r.Then(nil)(&desired.State{Family: proxy.IPv6}, model.Changes{})
	if latest, _ := r.Latest(proxy.IPv6); latest == nil {
		t.Error("Then(nil) did not record")
	}
}
