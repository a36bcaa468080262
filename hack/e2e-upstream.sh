#!/usr/bin/env bash
# hack/e2e-upstream.sh — upstream's own sig-network e2e suite (e2e.test v1.37.1, built from the
# Go module proxy) against the real cluster of hack/cluster.sh, with svcproxy or, for
# comparison, upstream kube-proxy v1.37.1 as the kube-proxy DaemonSet.
#
#   make e2e-upstream MODE=nftables|iptables|ebpf PROXY=svcproxy|kube-proxy [SUITE=all|conformance]
#   (MODE=ebpf: svcproxy only; with TC=eth0 [ACCEL=native|best-effort] [DSR=1] its tc programs
#   [and XDP] [tunnelling every Service by DSR] on the nodes' eth0, results in
#   svcproxy-ebpf+tc[+xdp][+dsr])
#
# Each run brings up a fresh cluster (hack/cluster.sh down + up: rules of a previous proxy never
# linger), runs the selection with `ginkgo -p` from inside svk-cp, writes the ginkgo JSON report
# and a per-group summary to _output/cluster/e2e/<proxy>-<mode>[-conformance]/, and leaves the
# cluster up for inspection (`make cluster-down` removes it). Exit status: 0 only if no selected
# spec failed.
#
# Selection (SUITE=all, the default): every `[sig-network] ... [Conformance]` spec, and the
# groups that exercise the service proxy: Services, EndpointSlice, Conntrack, Networking
# Granular Checks: Services, KubeProxy. Skipped: what test/cluster/e2e-skips.txt lists, each
# with its reason (SUITE=conformance: only the Conformance specs).
# Knobs: PROCS (ginkgo processes, default 4), KEEP=1 (reuse a running cluster instead of a
# fresh one; it must run the same PROXY and MODE), GINKGO_ARGS (extra ginkgo flags).
set -euo pipefail
# shellcheck source=cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"
export PROXY=${PROXY:-svcproxy} MODE=${MODE:-nftables}
SUITE=${SUITE:-all}
PROCS=${PROCS:-4}
SKIPS=$ROOT/test/cluster/e2e-skips.txt
CONFORMANCE='\[sig-network\] .*\[Conformance\]'
GROUPS_RE='\[sig-network\] (Services|EndpointSlice|Conntrack|KubeProxy|Networking Granular Checks: Services) '

focus() {
  case $SUITE in
  all) echo "$CONFORMANCE|$GROUPS_RE" ;;
  conformance) echo "$CONFORMANCE" ;;
  *) die "SUITE must be all or conformance" ;;
  esac
}

# skip_regex: the skip file's patterns (first field of each non-comment line), or'ed.
skip_regex() {
  { grep -vE '^\s*(#|$)' "$SKIPS" || true; } | awk -F '\t' '{print $1}' | paste -sd'|'
}

# check_images fails when an image tag we build is not what this e2e.test asks for.
check_images() {
  local e2e=$1 list ref
  list=$("$e2e" --list-images 2>/dev/null)
  for ref in registry.k8s.io/pause:3.10.2 registry.k8s.io/e2e-test-images/agnhost:2.66.1 \
    registry.k8s.io/e2e-test-images/busybox:1.37.0-2 registry.k8s.io/e2e-test-images/regression-issue-74839:1.5 \
    registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1 \
    registry.k8s.io/build-image/distroless-iptables:v0.9.7; do
    grep -qxF "$ref" <<<"$list" || die "e2e.test does not list $ref: update hack/cluster/images.sh"
  done
}

# ginkgo UBIN OUT NAME PROCS LABELS: one ginkgo run of the selection, from inside svk-cp.
ginkgo() {
  local ubin=$1 out=$2 name=$3 procs=$4 labels=$5
  # shellcheck disable=SC2086 # GINKGO_ARGS is a list of flags
  (cd "$out" && in_ns cp "$ubin/ginkgo" "$procs" --no-color --timeout=3h --label-filter="$labels" \
    --focus="$(focus)" --skip="$(skip_regex)" --json-report="report-$name.json" ${GINKGO_ARGS:-} \
    "$ubin/e2e.test" -- --kubeconfig="$RUN/admin.kubeconfig" --provider=skeleton --num-nodes="$(wc -w <<<"$NODES")" \
    --kubectl-path="$ubin/kubectl" --report-dir="$out" --e2e-output-dir="$out") >"$out/ginkgo-$name.log" 2>&1
}

main() {
  [[ $(id -u) == 0 ]] || die "run as root"
  local ubin out t0
  ubin=$("$HACK/build-upstream.sh" e2e.test ginkgo kubectl)
  check_images "$ubin/e2e.test"
  check_north_south
  out=$CL/e2e/$(run_name)$([[ $SUITE == all ]] || echo "-$SUITE")
  rm -rf "$out" && mkdir -p "$out"
  if [[ ${KEEP:-0} != 1 ]]; then
    "$HACK/cluster.sh" down
    "$HACK/cluster.sh" up
  fi
  log "running upstream e2e ($SUITE) against $(run_name); logs: $out/ginkgo-*.log"
  t0=$SECONDS
  local rc=0
  # [Serial] and [Disruptive] specs (e.g. "should work after restarting kube-proxy", which
  # deletes the DaemonSet's pods) run alone, after the others: as upstream's CI runs them.
  ginkgo "$ubin" "$out" parallel "--procs=$PROCS" '!Serial && !Disruptive' || rc=$?
  ginkgo "$ubin" "$out" serial "--procs=1" 'Serial || Disruptive' || rc=$?
  echo "$((SECONDS - t0))" >"$out/wall-seconds"
  "$HACK/e2e-summary.sh" "$out" | tee "$out/summary.txt"
  log "ginkgo exit $rc after $((SECONDS - t0)) s"
  return "$rc"
}

main "$@"
