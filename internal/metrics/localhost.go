package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// LabelProtocol is the protocol label of the localhost node-port rejects.
const LabelProtocol = "protocol"

// LabelReason says why the localhost node-port proxy refused a connection.
const LabelReason = "reason"

// The reasons of LocalhostNodePortRefusedConnectionsTotal.
const (
	RefusedPortLimit   = "port_limit"   // the node port's connection cap
	RefusedLimit       = "limit"        // the family's connection cap
	RefusedNoEndpoints = "no_endpoints" // the port's endpoints went away
)

// The localhost node-port families of nftables mode (gate
// KubeProxyNFTablesLocalhostNodePorts, KEP-6032), registered only with the
// gate on, as upstream's (WithLocalhostNodePorts).
var (
	// LocalhostNodePortListeners is the number of loopback listeners of
	// the userspace node-port proxy (internal/localnodeport).
	LocalhostNodePortListeners = gauge("nftables_localhost_nodeport_listeners",
		"Number of active localhost NodePort userspace proxy listeners.", LabelIPFamily)
	// LocalhostNodePortListenerCreationFailuresTotal counts the node ports
	// that could not be bound on loopback.
	LocalhostNodePortListenerCreationFailuresTotal = counter("nftables_localhost_nodeport_listener_creation_failures_total",
		"Number of localhost NodePort userspace proxy listener creation failures.", LabelIPFamily)
	// LocalhostNodePortRefusedConnectionsTotal counts the connections the
	// proxy accepted and reset instead of serving; svcproxy's own, hence
	// its prefix.
	LocalhostNodePortRefusedConnectionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcproxy_localhost_nodeport_refused_connections_total",
		Help: "Connections to localhost NodePorts that the userspace proxy reset instead of serving: port_limit and limit when its connection caps were reached, no_endpoints while a port whose endpoints went away keeps its listener.",
	}, []string{LabelIPFamily, LabelReason})
)

// LocalhostRejects reads the packet counts of the nftables counters that
// count rejected localhost node-port traffic: family ("IPv4", "IPv6") →
// protocol ("TCP", "UDP", "SCTP") → packets. A family or protocol without
// its counter is left out.
type LocalhostRejects interface {
	RejectedPackets() map[string]map[string]uint64
}

// WithLocalhostNodePorts registers, in nftables mode, the localhost
// node-port families, with r reading the reject counters at scrape time.
func WithLocalhostNodePorts(r LocalhostRejects) Option {
	return func(o *registerOptions) { o.localhost, o.localhostOn = r, true }
}

func newLocalhostCollectors(r LocalhostRejects) []prometheus.Collector {
	return []prometheus.Collector{
		LocalhostNodePortListeners,
		LocalhostNodePortListenerCreationFailuresTotal,
		LocalhostNodePortRefusedConnectionsTotal,
		&rejectCollector{reader: r, desc: prometheus.NewDesc("kubeproxy_nftables_localhost_nodeport_rejected_packets_total",
			alpha("Number of packets rejected on localhost NodePorts. UDP and SCTP are always rejected; TCP is rejected when the localhost NodePort proxy is not running"),
			[]string{LabelIPFamily, LabelProtocol}, nil)},
	}
}

// rejectCollector reports the reject counters, read at scrape time as
// upstream does (no polling loop).
type rejectCollector struct {
	reader LocalhostRejects
	desc   *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *rejectCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *rejectCollector) Collect(ch chan<- prometheus.Metric) {
	if c.reader == nil {
		return
	}
	for family, protos := range c.reader.RejectedPackets() {
		for proto, packets := range protos {
			m, err := prometheus.NewConstMetric(c.desc, prometheus.CounterValue, float64(packets), family, proto)
			if err != nil {
				klog.ErrorS(err, "Cannot build the localhost node port reject metric", "ipFamily", family, "protocol", proto)
				continue
			}
			ch <- m
		}
	}
}
