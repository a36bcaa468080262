package backends

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var (
	ebpfMapEntries = prometheus.NewDesc("svcproxy_ebpf_map_entries",
		"Entries in an ebpf mode map: services and backends after the last successful sync, revnat (translated sockets remembered) when scraped.",
		[]string{"map", metrics.LabelIPFamily}, nil)
	ebpfMapCapacity = prometheus.NewDesc("svcproxy_ebpf_map_capacity",
		"Capacity of an ebpf mode map: services and backends grow online when a sync needs more; past revnat's, the least recently used sockets are forgotten.",
		[]string{"map", metrics.LabelIPFamily}, nil)
	ebpfMapWrites = prometheus.NewDesc("svcproxy_ebpf_map_writes_total",
		"Map entries written or deleted by the socket hooks' syncs since svcproxy started, as of the last successful sync.", []string{metrics.LabelIPFamily}, nil)
	ebpfLinks = prometheus.NewDesc("svcproxy_ebpf_links_attached",
		"Socket hook programs attached to the cgroup after the last successful sync.", []string{metrics.LabelIPFamily}, nil)
	ebpfSocketsDestroyed = prometheus.NewDesc("svcproxy_ebpf_sockets_destroyed_total",
		"Connected UDP sockets destroyed because the endpoint the hooks sent them to no longer serves their frontend.", []string{metrics.LabelIPFamily}, nil)
	ebpfSocketDestroy = prometheus.NewDesc("svcproxy_ebpf_socket_destroy_supported",
		"1 when the kernel can destroy sockets (6.5 or later), 0 when it cannot; absent until the first cleanup round.", []string{metrics.LabelIPFamily}, nil)
)

// ebpfCollector reads each family's Stats when scraped: what the last
// sync recorded, no map read; and counts the reverse translation map,
// whose entries come and go with sockets, not syncs.
type ebpfCollector map[proxy.IPFamily]*ebpf.Proxier

func newEBPFCollector(hooks map[proxy.IPFamily]*ebpf.Proxier) prometheus.Collector {
	return ebpfCollector(hooks)
}

func (c ebpfCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- ebpfMapEntries
	ch <- ebpfMapCapacity
	ch <- ebpfMapWrites
	ch <- ebpfLinks
	ch <- ebpfSocketsDestroyed
	ch <- ebpfSocketDestroy
}

func (c ebpfCollector) Collect(ch chan<- prometheus.Metric) {
	for family, p := range c {
		collectSockets(ch, string(family), p.Sockets())
		st := p.Stats()
		if st == nil {
			continue
		}
		fam := string(family)
		for name, n := range st.Entries {
			ch <- prometheus.MustNewConstMetric(ebpfMapEntries, prometheus.GaugeValue, float64(n), name, fam)
		}
		for name, n := range st.Capacity {
			ch <- prometheus.MustNewConstMetric(ebpfMapCapacity, prometheus.GaugeValue, float64(n), name, fam)
		}
		ch <- prometheus.MustNewConstMetric(ebpfMapWrites, prometheus.CounterValue, float64(st.Writes), fam)
		ch <- prometheus.MustNewConstMetric(ebpfLinks, prometheus.GaugeValue, float64(st.Links), fam)
	}
}

func collectSockets(ch chan<- prometheus.Metric, family string, s *ebpf.Sockets) {
	ch <- prometheus.MustNewConstMetric(ebpfSocketsDestroyed, prometheus.CounterValue, float64(s.Destroyed()), family)
	switch n, capacity, ok, err := s.Remembered(); {
	case err != nil:
		klog.V(2).InfoS("Cannot count the translated sockets remembered", "ipFamily", family, "err", err)
	case ok:
		ch <- prometheus.MustNewConstMetric(ebpfMapEntries, prometheus.GaugeValue, float64(n), "revnat", family)
		ch <- prometheus.MustNewConstMetric(ebpfMapCapacity, prometheus.GaugeValue, float64(capacity), "revnat", family)
	}
	if supported, known := s.Supported(); known {
		v := 0.0
		if supported {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(ebpfSocketDestroy, prometheus.GaugeValue, v, family)
	}
}

// newTCFlowsCollector counts what the conntrack cleanup deleted from the tc
// programs' conntrack table of family, as
// kubeproxy_conntrack_reconciler_deleted_entries_total counts the kernel's
// flows and svcproxy_ebpf_sockets_destroyed_total the hooks' sockets.
func newTCFlowsCollector(flows *nodeport.Flows, family proxy.IPFamily) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "svcproxy_ebpf_tc_flows_deleted_total",
		Help:        "Flows of the tc programs' conntrack table deleted because the endpoint they were sent to no longer serves their frontend.",
		ConstLabels: prometheus.Labels{metrics.LabelIPFamily: string(family)},
	}, func() float64 { return float64(flows.Deleted(family)) })
}

var ebpfTCDrops = prometheus.NewDesc("svcproxy_ebpf_tc_dropped_packets_total",
	"Packets the tc and XDP programs dropped by themselves, by reason: no_masquerade_port (a new flow found no free masquerade port toward its endpoint), reply_lost (a masqueraded flow's reply tuple was taken by another flow after the table evicted it; the flow ends), dsr_too_big (a packet the direct-server-return tunnel's header made too big for the way out, IPv4 without DF), dsr_no_flow (a packet a peer tunnelled here that no flow or frontend here takes).",
	[]string{"reason", metrics.LabelIPFamily}, nil)

// tcDropsCollector reads the tc programs' drop counters of each family's
// flows when scraped (per-CPU counters in a map: one lookup each).
type tcDropsCollector struct {
	tc       *nodeport.Proxier
	families []proxy.IPFamily
}

func (c tcDropsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- ebpfTCDrops }

func (c tcDropsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, family := range c.families {
		d, err := c.tc.Drops(family)
		if err != nil {
			klog.V(2).InfoS("Cannot read the tc programs' drop counters", "err", err)
			return
		}
		fam := string(family)
		ch <- prometheus.MustNewConstMetric(ebpfTCDrops, prometheus.CounterValue, float64(d.NoMasqueradePort), "no_masquerade_port", fam)
		ch <- prometheus.MustNewConstMetric(ebpfTCDrops, prometheus.CounterValue, float64(d.ReplyLost), "reply_lost", fam)
		ch <- prometheus.MustNewConstMetric(ebpfTCDrops, prometheus.CounterValue, float64(d.DSRTooBig), "dsr_too_big", fam)
		ch <- prometheus.MustNewConstMetric(ebpfTCDrops, prometheus.CounterValue, float64(d.DSRNoFlow), "dsr_no_flow", fam)
	}
}
