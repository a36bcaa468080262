#!/usr/bin/env bash
# hack/update-upstream-gomod.sh [KUBE_VERSION] — regenerate hack/tools/kubernetes/go.{mod,sum}:
# the pinned wrapper module from which test tooling builds upstream binaries (kube-proxy,
# kubelet, kube-controller-manager, kube-scheduler, kubectl, agnhost, e2e.test). Test tooling
# only: the product never imports k8s.io/kubernetes. Run by a developer when bumping; commit.
#
# hack/update-upstream-gomod.sh --previous KUBE_VERSION — the same for an older minor, kube-proxy
# only, into hack/tools/kubernetes-1.Y/ (hack/build-upstream.sh --minor 1.Y): the rollback tests
# run the previous minors' kube-proxy too.
set -euo pipefail
PREVIOUS=""
if [[ ${1:-} == --previous ]]; then
  PREVIOUS=1
  shift
  [[ $# == 1 ]] || { echo "usage: $0 --previous v1.Y.Z" >&2; exit 1; }
fi
KV=${1:-v1.37.1}
SV=v0.${KV#v1.}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$HERE/tools/kubernetes
CMDS=(cmd/kube-proxy cmd/kubelet cmd/kube-controller-manager cmd/kube-scheduler cmd/kubectl
  test/images/agnhost test/images/regression-issue-74839)
if [[ -n $PREVIOUS ]]; then
  DIR=$HERE/tools/kubernetes-$(echo "${KV#v}" | cut -d. -f1,2)
  CMDS=(cmd/kube-proxy)
fi
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$DIR"
cd "$DIR"
# k8s.io/kubernetes replaces its staging modules with ./staging/... paths, which are ignored
# in a dependency: pin each one to the matching v0.Y.Z tag instead.
MODFILE=$(go list -m -json "k8s.io/kubernetes@$KV" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
STAGING=$(sed -n '/^replace (/,/^)/p' "$MODFILE" | awk '/=> \.\/staging/ {print $1}')
{
  printf 'module upstream/kubernetes\n\ngo 1.26.0\n\nreplace (\n'
  for m in $STAGING; do printf '\t%s => %s %s\n' "$m" "$m" "$SV"; done
  printf ')\n'
} > go.mod
rm -f go.sum
for c in "${CMDS[@]}"; do
  go get -tool "k8s.io/kubernetes/$c@$KV"
done
[[ -z $PREVIOUS ]] || { go mod tidy; exit 0; }
# The ginkgo CLI must match the ginkgo library e2e.test is built with: keep the selected version.
GV=$(go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
go get -tool "github.com/onsi/ginkgo/v2/ginkgo@$GV"
go mod tidy
# e2e.test is a test binary (go test -c): tidy does not record its test-only dependencies,
# so compile-list them once to complete go.sum.
go list -test -deps k8s.io/kubernetes/test/e2e >/dev/null
