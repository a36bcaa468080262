package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// The nfacct counter names the iptables backend uses in
// "-m nfacct --nfacct-name" rules; their packet counts become the
// kubeproxy_iptables_* families below.
const (
	NFAcctCTStateInvalidDropped     = "ct_state_invalid_dropped_pkts"
	NFAcctLocalhostNodePortAccepted = "localhost_nps_accepted_pkts"
)

// NFAcctReader reads the packet count of one nfacct counter
// (knfacct.Interface is one; this package stays a leaf).
type NFAcctReader interface {
	Get(counter string) (packets uint64, err error)
}

// nfacctCollector reports one nfacct counter as a Prometheus counter, read
// at scrape time so no polling loop is needed.
type nfacctCollector struct {
	counter string
	desc    *prometheus.Desc
	reader  NFAcctReader
}

// NFAcctCollectors returns the iptables-mode families that report the
// nfacct counters, read through r at scrape time (r may be nil: the kernel
// lacks nfacct, and they report nothing).
func NFAcctCollectors(r NFAcctReader) []prometheus.Collector {
	return []prometheus.Collector{
		&nfacctCollector{
			counter: NFAcctCTStateInvalidDropped,
			desc: prometheus.NewDesc("kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
				Alpha("packets dropped by iptables to work around conntrack problems"), nil, nil),
			reader: r,
		},
		&nfacctCollector{
			counter: NFAcctLocalhostNodePortAccepted,
			desc: prometheus.NewDesc("kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
				Alpha("Number of packets accepted on nodeports of loopback interface"), nil, nil),
			reader: r,
		},
	}
}

// Describe implements prometheus.Collector.
func (c *nfacctCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector. A counter that cannot be read
// (no reader: the kernel lacks nfacct; or the object not yet created by
// the first sync) is left out of the scrape, as upstream leaves it, rather
// than reported as zero, which would look like a reset.
func (c *nfacctCollector) Collect(ch chan<- prometheus.Metric) {
	if c.reader == nil {
		return
	}
	packets, err := c.reader.Get(c.counter)
	if err != nil {
		klog.V(4).InfoS("Cannot read nfacct counter", "counter", c.counter, "err", err)
		return
	}
	m, err := prometheus.NewConstMetric(c.desc, prometheus.CounterValue, float64(packets))
	if err != nil {
		klog.ErrorS(err, "Cannot build nfacct metric", "counter", c.counter)
		return
	}
	ch <- m
}
