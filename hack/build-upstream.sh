#!/usr/bin/env bash
# hack/build-upstream.sh [--minor 1.Y] NAME... — build upstream Kubernetes binaries for test
# tooling, from the Go module proxy only, pinned by hack/tools/kubernetes/go.{mod,sum}
# (hack/update-upstream-gomod.sh). The product never imports k8s.io/kubernetes; only tests and
# benchmarks run these binaries.
#
#   NAME: kube-proxy kubelet kube-controller-manager kube-scheduler kubectl
#         agnhost regression-issue-74839 e2e.test ginkgo
#   --minor 1.Y: an older minor, pinned by hack/tools/kubernetes-1.Y/ (kube-proxy only;
#         hack/update-upstream-gomod.sh --previous), for the rollback tests.
#
# Binaries go to _output/upstream/<kube-version>-<hash of go.mod+go.sum>/ (override with
# UPSTREAM_BIN_DIR); a binary already there is reused in 0 s. Prints the bin dir (only that) on
# stdout; progress goes to stderr. Cold times on 2 cores: kube-proxy ~2 min, kubelet ~4,
# e2e.test ~5, agnhost ~4.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
MODDIR=$HACK/tools/kubernetes

log() { echo "[build-upstream] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

kube_version() {
  local v
  v=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$MODDIR/go.mod")
  [[ -n $v ]] || die "cannot find the k8s.io/kubernetes version in $MODDIR/go.mod"
  echo "$v"
}

# version_ldflags KV: stamp the version as upstream's release builds do (else v0.0.0-master).
version_ldflags() {
  local kv=$1 minor p ld="-s -w"
  minor=$(echo "$kv" | cut -d. -f2)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$kv -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  echo "$ld"
}

build_one() {
  local name=$1 out=$2 kv=$3 t0=$SECONDS ld
  ld=$(version_ldflags "$kv")
  log "building $name $kv ..."
  (
    cd "$MODDIR"
    case $name in
      e2e.test) go test -c -trimpath -ldflags "$ld" -o "$out/$name.tmp" k8s.io/kubernetes/test/e2e ;;
      agnhost | regression-issue-74839)
        CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" "k8s.io/kubernetes/test/images/$name" ;;
      ginkgo) go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" github.com/onsi/ginkgo/v2/ginkgo ;;
      kube-proxy | kubelet | kube-controller-manager | kube-scheduler | kubectl)
        go build -trimpath -ldflags "$ld" -o "$out/$name.tmp" "k8s.io/kubernetes/cmd/$name" ;;
      *) die "unknown binary $name" ;;
    esac
  ) >&2 || die "$name build failed"
  # Rename at the end: an interrupted build is never taken for a finished one.
  mv "$out/$name.tmp" "$out/$name"
  log "$name built in $((SECONDS - t0)) s"
}

main() {
  if [[ ${1:-} == --minor ]]; then
    [[ $# -ge 2 ]] || die "usage: $0 [--minor 1.Y] NAME..."
    MODDIR=$HACK/tools/kubernetes-$2
    [[ -f $MODDIR/go.mod ]] || die "no pinned module for minor $2 ($MODDIR; hack/update-upstream-gomod.sh --previous)"
    shift 2
  fi
  [[ $# -gt 0 ]] || die "usage: $0 [--minor 1.Y] NAME..."
  command -v go >/dev/null || die "go is not on PATH"
  local kv out key name
  kv=$(kube_version)
  key=$(cat "$MODDIR/go.mod" "$MODDIR/go.sum" | sha256sum | cut -c1-12)
  out=${UPSTREAM_BIN_DIR:-$ROOT/_output/upstream/$kv-$key}
  mkdir -p "$out"
  export GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local
  for name in "$@"; do
    [[ -x $out/$name ]] || build_one "$name" "$out" "$kv"
  done
  echo "$out"
}

main "$@"
