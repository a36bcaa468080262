package metrics

import "github.com/prometheus/client_golang/prometheus"

// svcproxy's own families, beyond upstream's: under the svcproxy_ prefix, so
// that no kubeproxy_* name means something upstream does not.

// QuarantinedServicePorts counts the service ports kept out of the
// dataplane because the kernel rejected them (see internal/syncer).
var QuarantinedServicePorts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "svcproxy_quarantined_service_ports",
	Help: "Service ports kept out of the dataplane because the kernel rejected their rules; each is retried when its Service or endpoints change.",
}, []string{LabelIPFamily})
