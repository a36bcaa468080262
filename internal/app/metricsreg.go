package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/metrics/legacyregistry"
	// As upstream's main: client-go's rest_client_* families and
	// kubernetes_build_info, registered in component-base's legacy registry.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/metrics"
)

// registerMetrics builds what /metrics serves: the kubeproxy_* families of
// the mode in their own registry, and component-base's legacy registry
// beside it, as upstream has it: go_* and process_* with component-base's
// settings, kubernetes_build_info, every rest_client_* family,
// registered_metrics_total and kubernetes_feature_enabled.
//
// b is the mode's row, backendMetrics its instance's metrics options.
func registerMetrics(cfg *config.Config, b *backends.Backend, backendMetrics []metrics.Option) (prometheus.Gatherer, error) {
	return registerMetricsIn(prometheus.NewRegistry(), cfg, metricsOptions(b, backendMetrics))
}

// registry is where registerMetricsIn registers the mode's families.
type registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// registerMetricsIn is registerMetrics into reg with opts; a test passes a
// registry that records the collectors, to list every family.
func registerMetricsIn(reg registry, cfg *config.Config, opts []metrics.Option) (prometheus.Gatherer, error) {
	if err := metrics.Register(reg, cfg.Mode, opts...); err != nil {
		return reg, err
	}
	if gate, ok := cfg.FeatureGate.(featuregate.MutableFeatureGate); ok {
		gate.AddMetrics()
	}
	return prometheus.Gatherers{legacyregistry.DefaultGatherer, reg}, nil
}

// metricsOptions are the options of metrics.Register for b's mode: the
// runtime collectors are component-base's, served beside; the row's own
// families and the instance's counters are the backend's.
func metricsOptions(b *backends.Backend, backendMetrics []metrics.Option) []metrics.Option {
	opts := []metrics.Option{metrics.WithoutRuntimeCollectors()}
	if len(b.Metrics) > 0 {
		opts = append(opts, metrics.WithFamilies(b.Metrics...))
	}
	return append(opts, backendMetrics...)
}
