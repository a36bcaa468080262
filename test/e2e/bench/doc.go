// Package bench is svcproxy's end-to-end scale benchmark (make bench-e2e):
// 10,000 Services × 10 endpoints created through a real kube-apiserver, then
// svcproxy started against them on one node of a test/e2e/framework cluster.
// It measures the time from process start to the first sync holding every
// Service, the latency from API write to kernel under a churn of
// EndpointSlice updates, the new-connection rate through a ClusterIP, a
// forced full sync with nothing changed (kernel changes, CPU), an unchanged
// restart, and peak RSS. Past -seed-api Services the rest are written into
// each run's etcd, once its API server is up, as copies of Service 0's
// stored objects (seedclone_test.go).
//
// The tests sit behind the build tag benche2e, so that neither make test nor
// go test ./... runs them (they take minutes and measure, not check):
//
//	go test -tags benche2e -run TestBenchE2E -v ./bench -args -runs 3
//
// hack/bench-e2e.sh runs them with the control plane built and as root.
package bench
