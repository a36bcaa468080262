package metrics

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// localhostTable is upstream v1.37.1's localhost node-port families
// (pkg/pipeline/metrics), written out independently of the definitions.
var localhostTable = []want{
	{"kubeproxy_nftables_localhost_nodeport_listeners", gaugeT, "Number of active localhost NodePort userspace proxy listeners.", fam, nil, nil},
	{"kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total", counterT, "Number of localhost NodePort userspace proxy listener creation failures.", fam, nil, nil},
	{"kubeproxy_nftables_localhost_nodeport_rejected_packets_total", counterT,
		"Number of packets rejected on localhost NodePorts. UDP and SCTP are always rejected; TCP is rejected when the localhost NodePort proxy is not running",
		[]string{"ip_family", "protocol"}, nil, nil},
}

type fakeRejects map[string]map[string]uint64

func (f fakeRejects) RejectedPackets() map[string]map[string]uint64 { return f }

func gatherLocalhost(t *testing.T, mode proxy.Mode, opts ...Option) map[string]*dto.MetricFamily {
	t.Helper()
	return gatherWith(t, mode, func() {
		LocalhostNodePortListeners.WithLabelValues("IPv4").Set(2)
		LocalhostNodePortListenerCreationFailuresTotal.WithLabelValues("IPv4")
	}, opts...)
}

// TestLocalhostFamilies: upstream registers the three families in
// nftables mode with the gate on, and nowhere else.
func TestLocalhostFamilies(t *testing.T) {
	rejects := fakeRejects{"IPv4": {"UDP": 3, "TCP": 1}, "IPv6": {"SCTP": 5}}
	got := gatherLocalhost(t, proxy.ModeNFTables, WithLocalhostNodePorts(rejects))
	for _, w := range localhostTable {
		mf, ok := got[w.name]
		if !ok {
			t.Errorf("%s missing", w.name)
			continue
		}
		checkFamily(t, w, mf)
	}
	samples := map[string]float64{}
	for _, m := range got["kubeproxy_nftables_localhost_nodeport_rejected_packets_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		samples[l["ip_family"]+"/"+l["protocol"]] = m.GetCounter().GetValue()
	}
	if len(samples) != 3 || samples["IPv4/UDP"] != 3 || samples["IPv4/TCP"] != 1 || samples["IPv6/SCTP"] != 5 {
		t.Errorf("rejected packets %v, want IPv4/UDP 3, IPv4/TCP 1, IPv6/SCTP 5", samples)
	}
	for _, tc := range []struct {
		mode proxy.Mode
		opts []Option
	}{
		{proxy.ModeNFTables, nil},
		{proxy.ModeIPTables, []Option{WithLocalhostNodePorts(rejects)}},
		{proxy.ModeIPVS, []Option{WithLocalhostNodePorts(rejects)}},
	} {
		got := gatherLocalhost(t, tc.mode, tc.opts...)
		for _, w := range localhostTable {
			if _, ok := got[w.name]; ok {
				t.Errorf("%s mode (%d options): %s registered", tc.mode, len(tc.opts), w.name)
			}
		}
	}
}
