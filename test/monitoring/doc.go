// Package monitoring checks deploy/monitoring and the kubernetes-mixin's
// kube-proxy dashboard against what svcproxy serves: every query is parsed
// with Prometheus' own PromQL parser, and every metric of the kube-proxy
// job it selects must be a family svcproxy registers (testdata/metrics.txt,
// kept by internal/app's TestMetricsInventory), used as its type allows.
// Each alert is also evaluated, as Prometheus' rule manager does, over node
// histories that must and must not fire it.
//
// It is a nested module so that the Prometheus module, which requires newer
// Kubernetes libraries than the daemon's, stays out of the daemon's go.mod.
package monitoring
