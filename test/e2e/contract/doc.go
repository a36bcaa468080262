// Package contract is the differential suite: it runs svcproxy
// (built from the tree) and upstream kube-proxy v1.37.1 (built by
// hack/build-upstream.sh) on the same inputs, inside network namespaces the
// tests create, and compares what a user or tool can observe: --help,
// --write-config-to, accept/reject with the fields named, and the runtime
// endpoints. Every difference must be explained, one reason each, in
// testdata/deliberate-differences.yaml; anything else fails.
//
// CONTRACT_UPSTREAM_MINOR compares with an earlier minor instead: those
// differences are upstream's own changes since, listed in
// docs/user/support.md, so such a run is a measurement, not a pass.
package contract
