#!/usr/bin/env bash
# hack/cluster/net.sh up|down — the test cluster's network namespaces (layout: lib.sh).
# Every veth is created inside svk-cp with its peer moved straight into svk-nodeN, so no link
# ever exists in the root namespace, and no namespace gets a default route.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

node_up() {
  local n=$1 m ns
  ns=$(node_name "$n")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n $P-cp link add "$P-n$n" type veth peer name eth0 netns "$ns"
  ip -n $P-cp link set "$P-n$n" master $P-br0 up
  # XDP on the node's eth0 sends frames out of it (XDP_TX) onto this peer. A node's NIC receives
  # full L4 checksums, where a veth carries a local sender's partial one across, which XDP
  # cannot finish: checksums are computed here, as for a wire. (A veth takes XDP frames only in
  # NAPI mode, and with GRO alone this kernel stops after 256 of them: the peer would need an
  # XDP program of its own, which these scripts do not load yet; see docs/conformance.md.)
  [[ $ACCEL == disabled ]] || in_ns cp ethtool -K "$P-n$n" gro on tx off
  ip -n "$ns" addr add "$(node_ip "$n")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n $P-cp route add "$(node_cidr "$n")" via "$(node_ip "$n")"
  for m in $NODES; do
    [[ $m == "$n" ]] || ip -n "$ns" route add "$(node_cidr "$m")" via "$(node_ip "$m")"
  done
  # Service VIPs need a route for the node's own (host-network) clients; the proxy DNATs them
  # before they would ever be forwarded.
  ip -n "$ns" route add "$SVC_CIDR" via "$CP_IP" dev eth0
  in_ns "node$n" sysctl -qw net.ipv4.ip_forward=1
  # bridged pod-to-pod traffic on one node must pass netfilter (ClusterIP hairpin, conntrack)
  in_ns "node$n" sysctl -qw net.bridge.bridge-nf-call-iptables=1
}

up() {
  ip netns add $P-cp
  ip -n $P-cp link set lo up
  ip -n $P-cp link add $P-br0 type bridge
  ip -n $P-cp addr add "$CP_IP/24" dev $P-br0
  ip -n $P-cp link set $P-br0 up
  local n
  for n in $NODES; do node_up "$n"; done
}

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$P-(cp|node[0-9]+)\$" || true); do
    ip netns del "$ns"
  done
}

case ${1:-} in
up) up ;;
down) down ;;
*) die "usage: $0 up|down" ;;
esac
