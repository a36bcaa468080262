package desired

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var (
	zoneA, zoneB = []string{"zone-a"}, []string{"zone-b"}
	nodeA, nodeB = []string{"node-a"}, []string{"node-b"}
)

func TestCategorize(t *testing.T) {
	tests := []struct {
		name           string
		eps            []model.Endpoint
		cluster, local []Endpoint
	}{
		{"none", nil, nil, nil},
		{"ready everywhere", []model.Endpoint{readyEP("10.0.2.1", "node-b"), readyEP("10.0.1.1", "node-a")},
			endpointsOf("10.0.1.1:8080", "10.0.2.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"not ready and not terminating are unusable", []model.Endpoint{ep("10.0.1.1", "node-a", false, true, false), deadEP("10.0.1.2", "node-a")},
			nil, nil},
		{"terminating fallback for both sets", []model.Endpoint{termEP("10.0.1.1", "node-a"), termEP("10.0.2.1", "node-b")},
			endpointsOf("10.0.1.1:8080", "10.0.2.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"terminating ignored while ready exist", []model.Endpoint{termEP("10.0.1.1", "node-a"), readyEP("10.0.2.1", "node-b")},
			endpointsOf("10.0.2.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"local falls back separately", []model.Endpoint{termEP("10.0.1.1", "node-a"), readyEP("10.0.2.1", "node-b"), deadEP("10.0.1.2", "node-a")},
			endpointsOf("10.0.2.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"local ready preferred", []model.Endpoint{termEP("10.0.1.1", "node-a"), readyEP("10.0.1.2", "node-a")},
			endpointsOf("10.0.1.2:8080"), endpointsOf("10.0.1.2:8080")},
		{"other family skipped", []model.Endpoint{readyEP("fd00:10::1:1", "node-a"), readyEP("10.0.2.1", "node-b")},
			endpointsOf("10.0.2.1:8080"), nil},
		{"zone hints", []model.Endpoint{withHints(readyEP("10.0.1.1", "node-a"), zoneA, nil), withHints(readyEP("10.0.2.1", "node-b"), zoneB, nil)},
			endpointsOf("10.0.1.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"zone hints: one missing means none", []model.Endpoint{withHints(readyEP("10.0.1.1", "node-a"), zoneA, nil), readyEP("10.0.2.1", "node-b")},
			endpointsOf("10.0.1.1:8080", "10.0.2.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"zone hints: none for our zone means none", []model.Endpoint{withHints(readyEP("10.0.2.1", "node-b"), zoneB, nil), withHints(readyEP("10.0.2.2", "node-c"), zoneB, nil)},
			endpointsOf("10.0.2.1:8080", "10.0.2.2:8080"), nil},
		{"zone hints only counted on ready endpoints", []model.Endpoint{withHints(readyEP("10.0.2.1", "node-b"), zoneA, nil), termEP("10.0.2.2", "node-b")},
			endpointsOf("10.0.2.1:8080"), nil},
		{"node hints win over zone hints", []model.Endpoint{withHints(readyEP("10.0.1.1", "node-a"), zoneA, nodeA), withHints(readyEP("10.0.2.1", "node-b"), zoneA, nodeB)},
			endpointsOf("10.0.1.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"node hints incomplete fall back to zone", []model.Endpoint{withHints(readyEP("10.0.1.1", "node-a"), zoneA, nodeA), withHints(readyEP("10.0.2.1", "node-b"), zoneA, nil), withHints(readyEP("10.0.2.2", "node-c"), zoneB, nil)},
			endpointsOf("10.0.1.1:8080", "10.0.2.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"node hints not naming us fall back to zone", []model.Endpoint{withHints(readyEP("10.0.2.1", "node-b"), zoneA, nodeB), withHints(readyEP("10.0.2.2", "node-c"), zoneB, nodeB)},
			endpointsOf("10.0.2.1:8080"), nil},
		{"topology filters ready only; terminating still the fallback", []model.Endpoint{termEP("10.0.1.1", "node-a")},
			endpointsOf("10.0.1.1:8080"), endpointsOf("10.0.1.1:8080")},
		{"unsorted input comes out sorted and deduplicated", []model.Endpoint{readyEP("10.0.2.9", "node-b"), readyEP("10.0.2.1", "node-b"), readyEP("10.0.2.1", "node-b")},
			endpointsOf("10.0.2.1:8080", "10.0.2.9:8080"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := categorize(model.NewEndpointList(tt.eps...), proxy.IPv4, testNode)
			if !equalEndpoints(got.cluster, tt.cluster) || !equalEndpoints(got.local, tt.local) {
				t.Errorf("cluster %v local %v, want %v %v", got.cluster, got.local, tt.cluster, tt.local)
			}
		})
	}
}

func equalEndpoints(a, b []Endpoint) bool {
	return Dispatch{Endpoints: a}.Equal(Dispatch{Endpoints: b})
}

func TestDispatches(t *testing.T) {
	local, remote := readyEP("10.0.1.1", "node-a"), readyEP("10.0.2.1", "node-b")
	tests := []struct {
		name                        string
		iLocal, eLocal              bool
		eps                         []model.Endpoint
		internal, external, cluster Dispatch
	}{
		{"cluster policies", false, false, []model.Endpoint{local, remote},
			both(), both(), both()},
		{"no endpoints rejects everywhere", true, true, nil,
			Dispatch{Empty: Reject}, Dispatch{Empty: Reject}, Dispatch{Empty: Reject}},
		{"only unusable endpoints rejects everywhere", true, false, []model.Endpoint{deadEP("10.0.1.1", "node-a")},
			Dispatch{Empty: Reject}, Dispatch{Empty: Reject}, Dispatch{Empty: Reject}},
		{"iTP Local with local", true, false, []model.Endpoint{local, remote},
			Dispatch{Endpoints: endpointsOf("10.0.1.1:8080")}, both(), both()},
		{"iTP Local without local drops", true, false, []model.Endpoint{remote},
			Dispatch{Empty: Drop}, onlyRemote(), onlyRemote()},
		{"eTP Local with local", false, true, []model.Endpoint{local, remote},
			both(), Dispatch{Endpoints: endpointsOf("10.0.1.1:8080")}, both()},
		{"eTP Local without local drops", false, true, []model.Endpoint{remote},
			onlyRemote(), Dispatch{Empty: Drop}, onlyRemote()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := svcPort("s", addrs("172.30.0.1"), func(sp *model.ServicePort) {
				sp.InternalLocal, sp.ExternalLocal, sp.NodePort = tt.iLocal, tt.eLocal, 30080
			})
			st := Compute(nil, snapshot(proxy.IPv4, snapEntry{sp, tt.eps}), model.Changes{}, testNode, v4Options())
			got := st.Service(sp.Name)
			for _, d := range []struct {
				what      string
				got, want Dispatch
			}{{"Internal", got.Internal, tt.internal}, {"External", got.External, tt.external}, {"Cluster", got.Cluster, tt.cluster}} {
				if !d.got.Equal(d.want) {
					t.Errorf("%s = %+v, want %+v", d.what, d.got, d.want)
				}
			}
			if got.ExternalLocal != tt.eLocal {
				t.Errorf("ExternalLocal = %v, want %v", got.ExternalLocal, tt.eLocal)
			}
		})
	}
}

func both() Dispatch       { return Dispatch{Endpoints: endpointsOf("10.0.1.1:8080", "10.0.2.1:8080")} }
func onlyRemote() Dispatch { return Dispatch{Endpoints: endpointsOf("10.0.2.1:8080")} }

func TestHealthChecks(t *testing.T) {
	hc := func(sp *model.ServicePort) { sp.HealthCheckNodePort = 31000; sp.ExternalLocal = true }
	http := svcPort("lb", addrs("172.30.0.1"), hc)
	https := svcPort("lb", addrs("172.30.0.1"), func(sp *model.ServicePort) { hc(sp); sp.Name.Port = "https"; sp.Port = 443 })
	other := svcPort("a-other", addrs("172.30.0.2"), func(sp *model.ServicePort) { sp.HealthCheckNodePort = 31001 })
	plain := svcPort("plain", addrs("172.30.0.3"), nil)
	v6 := svcPort("v6", addrs("fd00:172:30::9"), hc)
	https443 := func(e model.Endpoint) model.Endpoint { e.Port = 8443; return e }
	snap := snapshot(proxy.IPv4,
		snapEntry{http, []model.Endpoint{readyEP("10.0.1.1", "node-a"), termEP("10.0.1.2", "node-a"), readyEP("10.0.2.1", "node-b")}},
		snapEntry{https, []model.Endpoint{https443(readyEP("10.0.1.1", "node-a"))}},
		snapEntry{other, []model.Endpoint{readyEP("10.0.2.2", "node-b")}},
		snapEntry{plain, []model.Endpoint{readyEP("10.0.1.3", "node-a")}},
		snapEntry{v6, nil},
	)
	got := Compute(nil, snap, model.Changes{}, testNode, v4Options()).HealthChecks
	want := []HealthCheck{
		{Service: proxy.ServiceName{Namespace: "ns", Name: "a-other"}, Port: 31001, LocalReady: 0},
		// Two distinct address:port pairs over two ports; the terminating one does not count.
		{Service: proxy.ServiceName{Namespace: "ns", Name: "lb"}, Port: 31000, LocalReady: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("HealthChecks = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("HealthChecks[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
