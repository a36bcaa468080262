#!/usr/bin/env bash
# hack/e2e-table.sh [RUN...] — the Markdown table of docs/conformance.md from the summaries that
# hack/e2e-upstream.sh left in _output/cluster/e2e/<run>/summary.txt: per test group,
# passed/failed/skipped for each run, then the wall time of each run.
# Default runs: svcproxy and kube-proxy, nftables and iptables, and svcproxy in ebpf mode (also
# with the tc programs alone, TC=eth0, and with XDP in front of them, TC=eth0 ACCEL=native).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E=$ROOT/_output/cluster/e2e
runs=("$@")
[[ ${#runs[@]} -gt 0 ]] || runs=(svcproxy-nftables svcproxy-iptables kube-proxy-nftables kube-proxy-iptables svcproxy-ebpf svcproxy-ebpf+tc svcproxy-ebpf+tc+xdp)
groups=("sig-network [Conformance]" "Services" "EndpointSlice" "Conntrack" "KubeProxy" "Networking Granular Checks: Services" "all selected")

# cell RUN GROUP: "passed/failed/skipped" of GROUP in RUN's summary, or "–" without one.
cell() {
  local f=$E2E/$1/summary.txt
  [[ -f $f ]] || { echo "–"; return; }
  awk -F '\t' -v g="$2" '$1==g{split($2,p," ");split($3,f," ");split($4,s," ");print p[2]"/"f[2]"/"s[2]}' "$f"
}

printf '| group (passed/failed/skipped) |'
for r in "${runs[@]}"; do printf ' %s |' "$r"; done
printf '\n|---|'
for _ in "${runs[@]}"; do printf -- '---|'; done
printf '\n'
for g in "${groups[@]}"; do
  printf '| %s |' "$g"
  for r in "${runs[@]}"; do printf ' %s |' "$(cell "$r" "$g")"; done
  printf '\n'
done
printf '| wall time (both passes) |'
for r in "${runs[@]}"; do
  w=$(cat "$E2E/$r/wall-seconds" 2>/dev/null || echo "")
  if [[ -n $w ]]; then printf ' %dm%02ds |' $((w / 60)) $((w % 60)); else printf ' – |'; fi
done
printf '\n'
