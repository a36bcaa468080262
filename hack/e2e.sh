#!/usr/bin/env bash
# hack/e2e.sh (`make e2e`) — svcproxy's end-to-end suite (nested module test/e2e): a real
# kube-apiserver + etcd, nodes running svcproxy, pods and clients, all in network namespaces
# the tests create and delete (prefix sve…-; the demo uses svpd-). See test/e2e/dataplane.
#
#   hack/e2e.sh           go test ./... in test/e2e, human output
#   hack/e2e.sh --json    the `go test -json` stream on stdout (hack/test.sh feeds it to its
#                         summary together with the unit tests); progress goes to stderr
#
# test/e2e/contract is the differential suite: svcproxy against upstream kube-proxy
# v1.37.1 (hack/build-upstream.sh kube-proxy: ~2-5 min once, then cached in _output/upstream) on
# --help, --write-config-to, a corpus of flag/config cases, /metrics, the endpoints and Events;
# differences are allowed only in test/e2e/contract/testdata/deliberate-differences.yaml. Its
# rollback tests also run kube-proxy of the minors pinned in hack/tools/kubernetes-1.*/
# (build-upstream.sh --minor; built here, before go test, like v1.37.1).
#
# Builds what it needs: kube-apiserver and etcd (hack/build-controlplane.sh: 0 s when cached,
# ~5–18 min cold), upstream kube-proxy (above), the earlier svcproxy of the upgrade scenarios
# (hack/build-svcproxy-at.sh --previous, --previous ebpf and --previous ebpf-tc), svcproxy and the
# test tools (the tests run `go build`). A missing binary or control plane is a failure, never a skip.
#
# Knobs: E2E_MODES (nftables,iptables,ebpf), E2E_RUN (go test -run), E2E_TIMEOUT (default 45m),
#        E2E_APISERVER_OUTAGE (how long the outage scenario stops the API server; default 60s),
#        E2E_SVCPROXY_V (svcproxy's -v, default 2; 4 logs every reflector retry),
#        E2E_CONNTRACK_EVENTS=1 (the rollback tests log the node's conntrack events to the
#        cluster's logs, to trace a failed connection; costs CPU),
#        CONTRACT_UPSTREAM_MINOR=1.35 (the differential suite compares with that earlier minor
#        instead of v1.37.1: expect the differences docs/user/support.md lists, not a pass),
#        E2E_EBPF_TC=eth0 (nodes in ebpf mode also run the experimental tc programs on their
#        eth0, --bpf-tc-interfaces, in every scenario; TestDataplane/ebpf+tc always runs the scenarios
#        with traffic from outside so), E2E_EBPF_ACCEL=native|best-effort (with E2E_EBPF_TC: XDP
#        in front of them, --bpf-acceleration; TestDataplane/ebpf+xdp always runs them with native),
#        SVCPROXY_BIN (test this binary instead of building ./cmd/svcproxy).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
# shellcheck source=lib/netns.sh
source "$HACK/lib/netns.sh"
JSON=""
[[ ${1:-} == --json ]] && JSON=-json
# Every namespace of this run starts with this prefix (the framework appends a random part).
export E2E_NS_PREFIX=sve$$x

log() { echo "[e2e] $*" >&2; }

# cleanup removes what a killed test binary may have left: only this run's namespaces and
# the processes inside them.
cleanup() {
  local n
  for n in $(remove_namespaces "$E2E_NS_PREFIX"); do log "removed leftover namespace $n"; done
}

main() {
  if [[ $(id -u) != 0 ]]; then
    log "ERROR: the e2e suite needs root (network namespaces)"
    return 1
  fi
  trap cleanup EXIT
  local t0=$SECONDS bin
  bin=$("$HACK/build-controlplane.sh") || { log "ERROR: building kube-apiserver/etcd failed"; return 1; }
  log "control plane binaries: ${bin#"$ROOT"/} ($((SECONDS - t0)) s)"
  export CP_BIN=$bin
  # The contract suite's kube-proxy binaries, built here so that a cold build (minutes each)
  # does not count against go test's timeout; the tests find them cached.
  t0=$SECONDS
  local d
  "$HACK/build-upstream.sh" kube-proxy >/dev/null || { log "ERROR: building kube-proxy failed"; return 1; }
  for d in "$HACK"/tools/kubernetes-1.*/; do
    [[ -d $d ]] || continue
    d=$(basename "$d")
    "$HACK/build-upstream.sh" --minor "${d#kubernetes-}" kube-proxy >/dev/null ||
      { log "ERROR: building kube-proxy ${d#kubernetes-} failed"; return 1; }
  done
  log "upstream kube-proxy binaries ($((SECONDS - t0)) s)"
  # The earlier svcproxy of the upgrade scenario, cached like the others.
  t0=$SECONDS
  "$HACK/build-svcproxy-at.sh" --previous >/dev/null || { log "ERROR: building the previous svcproxy failed"; return 1; }
  "$HACK/build-svcproxy-at.sh" --previous ebpf >/dev/null || { log "ERROR: building the previous svcproxy of ebpf mode failed"; return 1; }
  "$HACK/build-svcproxy-at.sh" --previous ebpf-tc >/dev/null || { log "ERROR: building the previous svcproxy with tc programs failed"; return 1; }
  log "previous svcproxy ($((SECONDS - t0)) s)"
  local args=(-count=1 -timeout "${E2E_TIMEOUT:-45m}")
  [[ -z ${E2E_RUN:-} ]] || args+=(-run "$E2E_RUN")
  [[ -n $JSON ]] && args+=("$JSON") || args+=(-v)
  log "go test ${args[*]} ./... (in test/e2e; logs of each cluster under _output/e2e/)"
  t0=$SECONDS
  local rc=0
  (cd "$ROOT/test/e2e" && go test "${args[@]}" ./...) || rc=$?
  log "e2e took $((SECONDS - t0)) s, exit $rc"
  return "$rc"
}

main "$@"
