#!/usr/bin/env bash
# hack/bench-e2e.sh (`make bench-e2e`) — svcproxy's end-to-end scale benchmark (test/e2e/bench,
# build tag benche2e): 10,000 Services × 10 endpoints created through a real kube-apiserver, then
# for each mode and run a fresh one-node cluster (namespaces prefix svb…-) started from a copy of
# the seeded etcd, svcproxy started against it, and measured: start → first sync holding every
# Service, kubeproxy_network_programming_duration_seconds under an EndpointSlice churn, peak RSS.
# Prints one table (median and every run) and writes _output/bench-e2e/results-<time>.json.
#
# The seeded etcd data dir is cached in _output/bench-e2e/seed-v<N>-<S>x<E>-<control plane build>/:
# the first run creates it through the API (1–2.5 min at 10k; the API server's ClusterIP
# allocator is O(n) per Service), later runs start from a copy in seconds. Root; builds what it
# needs (hack/build-controlplane.sh, svcproxy with its commit stamped). Not part of make test.
#
# Knobs: BENCH_E2E_MODES (nftables; nftables,iptables for both), BENCH_E2E_RUNS (3),
#        BENCH_E2E_SERVICES (10000), BENCH_E2E_ENDPOINTS (10), BENCH_E2E_CHANGES (300),
#        BENCH_E2E_RATE (4 updates/s), BENCH_E2E_MIN_SYNC (svcproxy minSyncPeriod; default 1s,
#        which 0s also means in a config file; 1ms syncs on every change),
#        BENCH_E2E_TIMEOUT (go test -timeout, 120m), SVCPROXY_BIN (measure this binary).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
# shellcheck source=lib/netns.sh
source "$HACK/lib/netns.sh"
OUT=$ROOT/_output/bench-e2e
# Every namespace of this run starts with this prefix (the framework appends a random part).
export E2E_NS_PREFIX=svb$$x

log() { echo "[bench-e2e] $*" >&2; }

# cleanup removes what a killed test binary may have left: this run's namespaces, the processes
# inside them (svcproxy, etcd, kube-apiserver) and their etcd copies (150 MB each).
cleanup() {
  local n d
  for n in $(remove_namespaces "$E2E_NS_PREFIX"); do log "removed leftover namespace $n"; done
  for d in "$ROOT"/_output/e2e/"$E2E_NS_PREFIX"*/cp/etcd-data; do
    [[ -e $d ]] && rm -rf "$d"
  done
  return 0
}

build_svcproxy() {
  local commit tree
  commit=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  tree=$(git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null && echo clean || echo dirty)
  mkdir -p "$OUT"
  (cd "$ROOT" && go build -trimpath -o "$OUT/svcproxy" \
    -ldflags "-X github.com/svcproxy/svcproxy/internal/app.gitCommit=$commit -X github.com/svcproxy/svcproxy/internal/app.gitTreeState=$tree" \
    ./cmd/svcproxy)
  SVCPROXY_BIN=$OUT/svcproxy
}

main() {
  if [[ $(id -u) != 0 ]]; then
    log "ERROR: the benchmark needs root (network namespaces)"
    return 1
  fi
  trap cleanup EXIT
  local t0=$SECONDS bin
  bin=$("$HACK/build-controlplane.sh") || { log "ERROR: building kube-apiserver/etcd failed"; return 1; }
  log "control plane binaries: ${bin#"$ROOT"/} ($((SECONDS - t0)) s)"
  export CP_BIN=$bin
  [[ -n ${SVCPROXY_BIN:-} ]] || build_svcproxy
  export SVCPROXY_BIN
  log "svcproxy: $SVCPROXY_BIN — $("$SVCPROXY_BIN" --version 2>&1 | head -1)"
  log "machine: $(nproc) CPUs, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  local args=(
    -modes "${BENCH_E2E_MODES:-nftables}" -runs "${BENCH_E2E_RUNS:-3}"
    -services "${BENCH_E2E_SERVICES:-10000}" -endpoints "${BENCH_E2E_ENDPOINTS:-10}"
    -changes "${BENCH_E2E_CHANGES:-300}" -rate "${BENCH_E2E_RATE:-4}"
    -min-sync-period "${BENCH_E2E_MIN_SYNC:-}"
  )
  log "go test -tags benche2e -run TestBenchE2E ./bench -args ${args[*]} (in test/e2e)"
  t0=$SECONDS
  local rc=0
  (cd "$ROOT/test/e2e" && go test -tags benche2e -count=1 -timeout "${BENCH_E2E_TIMEOUT:-120m}" \
    -run TestBenchE2E -v ./bench -args "${args[@]}") || rc=$?
  log "bench-e2e took $((SECONDS - t0)) s, exit $rc; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
  return "$rc"
}

main "$@"
