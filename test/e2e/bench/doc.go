// Package bench is svcproxy's end-to-end scale benchmark (make bench-e2e):
// 10,000 Services × 10 endpoints created through a real kube-apiserver, then
// svcproxy started against them on one node of a test/e2e/framework cluster.
// It measures the time from process start to the first sync holding every
// Service, kubeproxy_network_programming_duration_seconds under a churn of
// EndpointSlice updates, and peak RSS.
//
// The tests sit behind the build tag benche2e, so that neither make test nor
// go test ./... runs them (they take minutes and measure, not check):
//
//	go test -tags benche2e -run TestBenchE2E -v ./bench -args -runs 3
//
// hack/bench-e2e.sh runs them with the control plane built and as root.
package bench
