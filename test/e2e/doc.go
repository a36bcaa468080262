// Package e2e holds the end-to-end tooling of svcproxy: a real kube-apiserver + etcd
// (built by hack/build-controlplane.sh), "nodes" and "pods" as network namespaces, and
// the small programs that play the cluster parts no one else runs (cmd/e2ectl) and the
// pods themselves (cmd/podserver). hack/demo.sh drives them.
//
// It is a nested module so that its client-go and test dependencies stay out of the
// daemon's go.mod.
package e2e
