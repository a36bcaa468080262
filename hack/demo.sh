#!/usr/bin/env bash
# hack/demo.sh (`make demo`) — svcproxy in a throwaway cluster made of network namespaces.
#
#   svpd-net     a bridge: the "node network" 198.18.0.0/24 (a benchmarking range), no addresses
#   svpd-cp      etcd (on its own loopback) + kube-apiserver on 198.18.0.1:6443
#   svpd-node1   198.18.0.11, pods 10.244.1.0/24, runs svcproxy --hostname-override node-1
#   svpd-node2   198.18.0.12, pods 10.244.2.0/24, runs svcproxy --hostname-override node-2
#   svpd-pod-a   10.244.1.10 on node-1   ┐ podserver: answers with its pod name
#   svpd-pod-b   10.244.2.10 on node-2   │
#   svpd-pod-c   10.244.2.11 on node-2   ┘ (joins the Service when it is scaled up)
#   svpd-cli1    10.244.1.100 on node-1: a client pod
#   svpd-client  198.18.0.100: a client outside the cluster, on the node network
#
# Nothing is programmed in the root namespace: no links, addresses, routes or rules. No
# namespace has a route off the machine (the only links are between these namespaces).
# Everything is removed on exit, whatever happens.
#
# `hack/demo.sh down` (`make demo-down`) removes what a demo left behind: after a hard kill of
# the script (kill -9 skips its teardown) or while one is still running.
#
# Knobs: DEMO_REQUESTS (default 30), SVCPROXY_MODE (default nftables), SVCPROXY_V (log level, 2),
#        SVCPROXY_BIN (use this binary instead of building ./cmd/svcproxy).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
# shellcheck source=lib/netns.sh
source "$HACK/lib/netns.sh"
BIN=$ROOT/_output/bin
WORK=$ROOT/_output/demo
PIDS=$WORK/pids
LOGS=$WORK/logs
N=${DEMO_REQUESTS:-30}
MODE=${SVCPROXY_MODE:-nftables}
LOGV=${SVCPROXY_V:-2}

P=svpd                     # namespace prefix; every namespace of the demo starts with it
NODE_NET=198.18.0          # the node network (RFC 2544 benchmarking range, never routed here)
CP_IP=$NODE_NET.1
KAS_PORT=6443
CLIENT_IP=$NODE_NET.100
SVC_CIDR=10.96.0.0/16
CLUSTER_CIDR=10.244.0.0/16
NODE_PORT=30080
# The Service's ports: HTTP over TCP and a UDP echo, both on port 80 and node port 30080.
PORTS=http/TCP/80/8080/$NODE_PORT,echo/UDP/80/8080/$NODE_PORT
SVCPROXY_BUILD_ERR=""
PASSED=0 # probes that met their expectation
FAILED=0

# ---------------------------------------------------------------- output helpers
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
log() { echo "    $*"; }
die() {
  echo "demo: ERROR: $*" >&2
  exit 1
}

# ---------------------------------------------------------------- namespaces
ns() { echo "$P-$1"; }
inns() {
  local n=$1
  shift
  ip netns exec "$(ns "$n")" "$@"
}

add_ns() {
  ip netns add "$(ns "$1")"
  inns "$1" ip link set lo up
  inns "$1" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
}

# spawn NAME NS CMD... — run CMD in namespace NS in the background, log to $LOGS/NAME.log.
spawn() {
  local name=$1 n=$2
  shift 2
  ip netns exec "$(ns "$n")" "$@" >"$LOGS/$name.log" 2>&1 &
  echo $! >"$PIDS/$name.pid"
}

# ---------------------------------------------------------------- teardown
stop_processes() {
  local f pid
  [[ -d $PIDS ]] || return 0
  for f in "$PIDS"/*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
  done
  sleep 0.3
  for f in "$PIDS"/*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f")
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

delete_namespaces() { remove_namespaces "$P-" >/dev/null; }

teardown() {
  local rc=$?
  trap - EXIT INT TERM
  step "Tearing down"
  stop_processes
  CP_RUN=$WORK/cp "$HACK/controlplane.sh" stop 2>/dev/null || true
  delete_namespaces
  if ip netns list | grep -q "^$P-"; then
    echo "demo: WARNING: some $P-* namespaces are left: $(ip netns list | grep "^$P-" | tr '\n' ' ')" >&2
  else
    log "all $P-* namespaces and processes removed"
  fi
  if ((rc == 0)); then
    step "Demo finished"
  else
    echo "demo: FAILED (exit $rc); logs are in ${LOGS#"$ROOT"/}/" >&2
  fi
  echo "probes: $PASSED passed, $FAILED failed"
  exit "$rc"
}

# ---------------------------------------------------------------- build
build() {
  step "Building"
  [[ $(id -u) == 0 ]] || die "the demo needs root (network namespaces)"
  mkdir -p "$BIN"
  (cd "$ROOT/test/e2e" && go build -o "$BIN/" ./cmd/e2ectl ./cmd/podserver) || die "building test/e2e tools failed"
  log "e2ectl, podserver → ${BIN#"$ROOT"/}/"
  if [[ -n ${SVCPROXY_BIN:-} ]]; then
    [[ -x $SVCPROXY_BIN ]] || die "SVCPROXY_BIN=$SVCPROXY_BIN is not an executable"
    log "svcproxy: using $SVCPROXY_BIN"
  elif ! SVCPROXY_BUILD_ERR=$(cd "$ROOT" && go build -o "$BIN/svcproxy" ./cmd/svcproxy 2>&1); then
    log "svcproxy does not build yet (the demo goes on and stops at the svcproxy step)"
  else
    SVCPROXY_BUILD_ERR=""
PASSED=0 # probes that met their expectation
FAILED=0
    SVCPROXY_BIN=$BIN/svcproxy
    log "svcproxy → ${BIN#"$ROOT"/}/svcproxy"
  fi
  local t0=$SECONDS
  CP_BIN=$("$HACK/build-controlplane.sh") || die "building kube-apiserver/etcd failed"
  log "kube-apiserver, etcd → ${CP_BIN#"$ROOT"/}/ ($((SECONDS - t0)) s)"
}

# ---------------------------------------------------------------- topology
# veth_to_bridge NS IFNAME ADDR/LEN — connect namespace NS to the node-network bridge.
veth_to_bridge() {
  local n=$1 ifname=$2 addr=$3 peer="p-$1"
  ip -n "$(ns net)" link add "$peer" type veth peer name "$ifname" netns "$(ns "$n")"
  ip -n "$(ns net)" link set "$peer" master br0 up
  inns "$n" ip addr add "$addr" dev "$ifname"
  inns "$n" ip link set "$ifname" up
}

# add_pod NODE POD IP — a pod namespace behind node NODE (routed veth, /32 on the pod side).
add_pod() {
  local node=$1 pod=$2 ip=$3 gw host_if="v$2"
  gw=${ip%.*}.1
  add_ns "$pod"
  ip -n "$(ns "$node")" link add "$host_if" type veth peer name eth0 netns "$(ns "$pod")"
  inns "$node" ip addr add "$gw/32" dev "$host_if"
  inns "$node" ip link set "$host_if" up
  inns "$node" ip route add "$ip/32" dev "$host_if" src "$gw"
  inns "$pod" ip addr add "$ip/32" dev eth0
  inns "$pod" ip link set eth0 up
  inns "$pod" ip route add "$gw/32" dev eth0 scope link
  inns "$pod" ip route add default via "$gw" dev eth0   # to its node only; the node has no default route
}

build_topology() {
  step "Creating namespaces (prefix $P-)"
  add_ns net
  ip -n "$(ns net)" link add br0 type bridge
  ip -n "$(ns net)" link set br0 up

  add_ns cp
  veth_to_bridge cp eth0 "$CP_IP/24"

  local i
  for i in 1 2; do
    add_ns "node$i"
    inns "node$i" sysctl -qw net.ipv4.ip_forward=1
    veth_to_bridge "node$i" eth0 "$NODE_NET.1$i/24"
  done
  # Pod routes between the nodes (what a CNI would do).
  inns node1 ip route add 10.244.2.0/24 via "$NODE_NET.12"
  inns node2 ip route add 10.244.1.0/24 via "$NODE_NET.11"

  add_ns client
  veth_to_bridge client eth0 "$CLIENT_IP/24"

  add_pod node1 pod-a 10.244.1.10
  add_pod node2 pod-b 10.244.2.10
  add_pod node2 pod-c 10.244.2.11
  add_pod node1 cli1 10.244.1.100
  log "$(ip netns list | grep -c "^$P-") namespaces: $(ip netns list | awk '{print $1}' | grep "^$P-" | sort | tr '\n' ' ')"
}

# ---------------------------------------------------------------- control plane
start_controlplane() {
  step "Starting etcd + kube-apiserver in $(ns cp) (https://$CP_IP:$KAS_PORT)"
  CP_BIN=$CP_BIN CP_RUN=$WORK/cp CP_NETNS=$(ns cp) KAS_BIND=$CP_IP KAS_PORT=$KAS_PORT \
    SVC_CIDR=$SVC_CIDR "$HACK/controlplane.sh" start
  ADMIN_KC=$WORK/cp/admin.kubeconfig
  PROXY_KC=$WORK/cp/kube-proxy.kubeconfig
}

e2ectl() { inns client "$BIN/e2ectl" -kubeconfig "$ADMIN_KC" "$@"; }
set_endpoints() { e2ectl endpoints -service web -ports "$PORTS" "$@" | sed 's/^/    /'; }

create_objects() {
  step "Creating Nodes, the Service and its EndpointSlice (no controller-manager runs: e2ectl plays it)"
  e2ectl nodes "node-1=$NODE_NET.11,10.244.1.0/24" "node-2=$NODE_NET.12,10.244.2.0/24" | sed 's/^/    /'
  CLUSTER_IP=$(e2ectl service -name web -ports "$PORTS")
  log "service default/web: type NodePort, ClusterIP $CLUSTER_IP, ports 80/TCP and 80/UDP, nodePort $NODE_PORT (both) → targetPort 8080"
  set_endpoints pod-a=10.244.1.10@node-1 pod-b=10.244.2.10@node-2
}

start_pods() {
  step "Starting the pods"
  local pod
  for pod in pod-a pod-b pod-c; do
    spawn "$pod" "$pod" "$BIN/podserver" -name "$pod" -listen :8080
  done
  # Check the network without any service: each pod straight from the client pod.
  local ip
  for ip in 10.244.1.10 10.244.2.10 10.244.2.11; do
    inns cli1 "$BIN/e2ectl" probe -url "http://$ip:8080/" -n 1 -wait 10s >/dev/null \
      || die "pod $ip does not answer the client pod directly: the topology is broken"
  done
  log "pod-a, pod-b, pod-c answer directly from cli1 (pod network and node routes work)"
}

# ---------------------------------------------------------------- svcproxy
write_config() { # node-index
  local i=$1 f=$WORK/svcproxy-node$1.yaml
  cat >"$f" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: $MODE
clientConnection:
  kubeconfig: $PROXY_KC
clusterCIDR: $CLUSTER_CIDR
healthzBindAddress: $NODE_NET.1$i:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  # 0 = leave the kernel's conntrack settings alone (some are machine-wide).
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
  echo "$f"
}

svcproxy_not_ready() {
  echo >&2
  echo "demo: ERROR: svcproxy is not working yet — $1" >&2
  [[ -z ${2:-} ]] || { echo "---- last lines of $2:" >&2; tail -15 "$2" >&2; }
  echo "demo: everything before this step worked (namespaces, control plane, objects, pods)." >&2
  exit 1
}

start_svcproxy() {
  step "Starting svcproxy ($MODE) on both nodes"
  [[ -z $SVCPROXY_BUILD_ERR ]] || svcproxy_not_ready "it does not build:
$SVCPROXY_BUILD_ERR"
  local i cfg
  for i in 1 2; do
    cfg=$(write_config "$i")
    log "node$i: svcproxy --config ${cfg#"$ROOT"/} --hostname-override node-$i"
    # Each node its own state socket: both run on this machine, and a unix socket is a file,
    # not part of the network namespace. svcproxy explain takes the same --state-socket.
    spawn "svcproxy-node$i" "node$i" "$SVCPROXY_BIN" --config "$cfg" --hostname-override "node-$i" -v "$LOGV" \
      --state-socket "$WORK/run/node$i/svcproxy.sock"
  done
  local t0=$SECONDS ok
  for i in 1 2; do
    ok=""
    for _ in $(seq 1 300); do
      kill -0 "$(cat "$PIDS/svcproxy-node$i.pid")" 2>/dev/null \
        || svcproxy_not_ready "it exited on node$i" "$LOGS/svcproxy-node$i.log"
      if inns "node$i" curl -sf -o /dev/null "http://$NODE_NET.1$i:10256/healthz"; then ok=1; break; fi
      sleep 0.1
    done
    [[ -n $ok ]] || svcproxy_not_ready "node$i: /healthz not OK after 30 s" "$LOGS/svcproxy-node$i.log"
  done
  log "both healthy (/healthz 200) after $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- the show
probe() { # ns desc expect args...
  local n=$1 desc=$2 expect=$3
  shift 3
  echo "  from $desc:"
  if ! inns "$n" "$BIN/e2ectl" probe -n "$N" -wait 30s -expect "$expect" "$@"; then
    FAILED=$((FAILED + 1))
    die "probe from $desc failed (see above)"
  fi
  PASSED=$((PASSED + 1))
}

show_balancing() { # expect
  probe cli1 "pod cli1 on node-1 → ClusterIP" "$1" -url "http://$CLUSTER_IP:80/"
  probe client "client outside → NodePort on node-1" "$1" -url "http://$NODE_NET.11:$NODE_PORT/"
  probe client "client outside → NodePort on node-2" "$1" -url "http://$NODE_NET.12:$NODE_PORT/"
  probe cli1 "pod cli1 on node-1 → ClusterIP, UDP" "$1" -udp "$CLUSTER_IP:80"
  probe client "client outside → NodePort on node-2, UDP" "$1" -udp "$NODE_NET.12:$NODE_PORT"
}

show() {
  step "Balancing with 2 endpoints (pod-a on node-1, pod-b on node-2)"
  show_balancing pod-a,pod-b

  step "Scaling up: pod-c joins the EndpointSlice"
  set_endpoints pod-a=10.244.1.10@node-1 pod-b=10.244.2.10@node-2 pod-c=10.244.2.11@node-2
  show_balancing pod-a,pod-b,pod-c

  step "Scaling down: only pod-c is left"
  set_endpoints pod-c=10.244.2.11@node-2
  # -expect lists who may answer; wait until the rules no longer send to pod-a/pod-b.
  wait_only pod-c
  show_balancing pod-c

  step "The nftables table on node-1 (summary)"
  inns node1 nft list tables | sed 's/^/    /'
}

# wait_only POD — until 10 requests in a row to the ClusterIP are all answered by POD.
wait_only() {
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    if inns cli1 "$BIN/e2ectl" probe -n 10 -expect "$1" -url "http://$CLUSTER_IP:80/" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  die "the ClusterIP still reaches other pods than $1 after 30 s"
}

main() {
  build
  mkdir -p "$WORK"
  # Leftovers of an interrupted earlier run (only our own: the pid files and $P-* namespaces).
  stop_processes
  delete_namespaces
  rm -rf "$LOGS" "$PIDS"
  mkdir -p "$LOGS" "$PIDS"
  trap teardown EXIT
  trap 'exit 130' INT TERM
  build_topology
  start_controlplane
  create_objects
  start_pods
  start_svcproxy
  show
}

# ---------------------------------------------------------------- down
# down removes every $P-* namespace with the processes inside it, and the demo's control-plane
# state (certificates, etcd data, pid files). Every process of the demo (podservers, svcproxy,
# etcd, kube-apiserver, probes) runs inside one of those namespaces, so they are found through
# them (ip netns pids), never by name nor through an old pid file whose PID may belong to
# another process by now. A demo script still running fails at its next step and exits.
# Idempotent: with nothing left it says so and succeeds. Logs stay in $LOGS.
down() {
  [[ $(id -u) == 0 ]] || die "demo-down needs root (network namespaces)"
  local n pids nns=0 nprocs=0
  for n in $(ip netns list | awk '{print $1}' | grep "^$P-" || true); do
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    nns=$((nns + 1))
    nprocs=$((nprocs + $(echo "$pids" | wc -w)))
  done
  delete_namespaces
  rm -rf "$PIDS" "$WORK/cp"
  if ip netns list | grep -q "^$P-"; then
    die "some $P-* namespaces are left: $(ip netns list | grep "^$P-" | awk '{print $1}' | tr '\n' ' ')"
  fi
  if ((nns == 0)); then
    echo "demo-down: nothing to remove (no $P-* namespace)"
  else
    echo "demo-down: removed $nns $P-* namespaces and the $nprocs processes in them"
  fi
  echo "demo-down: control-plane state ${WORK#"$ROOT"/}/cp removed; logs kept in ${LOGS#"$ROOT"/}/"
}

case ${1:-} in
"") main ;;
down) down ;;
*)
  echo "usage: $0 [down]" >&2
  exit 2
  ;;
esac
