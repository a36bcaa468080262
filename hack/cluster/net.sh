#!/usr/bin/env bash
# hack/cluster/net.sh up|down — the test cluster's network namespaces (layout: lib.sh).
# Every veth is created inside svk-cp with its peer moved straight into svk-nodeN, so no link
# ever exists in the root namespace, and no namespace gets a default route.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# take_xdp_frames DEV makes DEV, a node link's peer on the bridge, the wire that XDP on the
# node's eth0 sends its frames onto (XDP_TX):
#   - a veth takes XDP frames in NAPI mode only (GRO or an XDP program turns it on), and after
#     XDP_TX the node's eth0 wakes DEV's NAPI only if DEV has an XDP program: with GRO alone
#     the frames wait in DEV's ring, and once its 256 slots are full the node's ethtool -S eth0
#     counts only xdp_tx_errors and the flows XDP forwards stall. An XDP program that passes
#     every frame on (test/cluster/xdp-pass, pkg/testing/xdppass) keeps DEV taking them;
#   - a node's NIC receives complete L4 checksums, where a veth carries the partial one of a
#     sender on this machine across. XDP hands such packets to tc (which finishes them), so
#     with DEV's transmit checksumming on, XDP would forward nothing here: DEV computes the
#     checksums of what it sends to the node, as a wire delivers them.
take_xdp_frames() {
  local dev=$1
  in_ns cp ethtool -K "$dev" tx off >/dev/null # it lists the features it changed
  in_ns cp "$XDP_PASS" "$dev"
}

# build_xdp_pass builds test/cluster/xdp-pass into $XDP_PASS.
XDP_PASS=$CL/bin/xdp-pass
build_xdp_pass() {
  (cd "$ROOT" && GOFLAGS=-buildvcs=false go build -o "$XDP_PASS" ./test/cluster/xdp-pass) || die "building xdp-pass failed"
}

node_up() {
  local n=$1 m ns
  ns=$(node_name "$n")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n $P-cp link add "$P-n$n" type veth peer name eth0 netns "$ns"
  ip -n $P-cp link set "$P-n$n" master $P-br0 up
  [[ $ACCEL == disabled ]] || take_xdp_frames "$P-n$n"
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
  [[ $ACCEL == disabled ]] || build_xdp_pass
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
