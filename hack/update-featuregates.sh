#!/usr/bin/env bash
# hack/update-featuregates.sh — regenerate internal/config/zz_generated_features.go: the feature
# gates upstream kube-proxy registers (every Kubernetes gate, with stages, defaults, locks and
# dependencies), read from the k8s.io/kubernetes version pinned in hack/tools/kubernetes/go.mod.
# The product never imports k8s.io/kubernetes; it compiles this table. Run after bumping that pin.
set -euo pipefail
HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
export GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local
cd "$HACK/tools/kubernetes"
# -trimpath: the same build flags as hack/build-upstream.sh, so its build cache is reused.
go run -trimpath ./featuregates "$ROOT/internal/config/zz_generated_features.go"
echo "[update-featuregates] wrote internal/config/zz_generated_features.go" >&2
