# hack/cluster/lib.sh — settings and helpers shared by the test-cluster scripts (sourced by
# hack/cluster.sh, hack/cluster/*.sh and hack/e2e-upstream.sh; not executable on its own).
#
# The cluster lives entirely in network namespaces named svk-*:
#
#   svk-cp       bridge svk-br0 10.210.0.1/24; etcd (loopback), kube-apiserver on 10.210.0.1:6443,
#                kube-controller-manager, kube-scheduler; routes to both pod CIDRs via the nodes
#   svk-nodeN    eth0 10.210.0.1N/24 (veth peer svk-nN on svk-br0); containerd + runc, kubelet,
#                CNI bridge cni0 10.211.N.1/24 (host-local), pods in cni-* namespaces that
#                containerd creates; svcproxy or kube-proxy as a hostNetwork DaemonSet pod
#
# Services 10.96.0.0/16 (kubernetes 10.96.0.1, kube-dns 10.96.0.10). No namespace has a default
# route and none has a link to the root namespace: nothing can leave the machine, and nothing is
# programmed in the root namespace. Processes are started with `nsenter --net` (not
# `ip netns exec`, which would give each one a private mount namespace: kubelet's volume mounts
# must be visible to containerd and runc, and to the teardown).
# shellcheck shell=bash

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(cd "$HACK/.." && pwd)
CL=${CLUSTER_DIR:-$ROOT/_output/cluster}   # state: run/ (per run), images/ (cached), e2e/ (results)
RUN=$CL/run
PKI=$RUN/pki
IMAGES=${CLUSTER_IMAGES_DIR:-$CL/images}
# prefix of every namespace, link, node name and cgroup we create; another prefix (and
# CLUSTER_DIR) gives a second, independent cluster on the same machine
P=${CLUSTER_PREFIX:-svk}
NODES=${NODES:-"1 2"}
CP_IP=10.210.0.1
SVC_CIDR=10.96.0.0/16
CLUSTER_CIDR=10.211.0.0/16
DNS_IP=10.96.0.10
KUBE_VERSION=v1.37.1
# Cgroup v1 hierarchies each kubelet gets a root in (cgroupRoot /svk-nodeN); runc also creates
# the node's directory in the hybrid "unified" hierarchy, so teardown covers that one too.
CGROUPS="cpu cpuacct cpuset memory devices freezer blkio pids systemd"
# Host paths that kubelet and containerd 1.6 use whatever their root dirs are. The teardown
# removes the ones that did not exist before the first cluster-up (recorded in $CL/host-paths).
# /run/svcproxy: the DaemonSet's state directory (hostPath), which both nodes share here.
HOST_PATHS="/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni /run/containerd /run/xtables.lock /run/svcproxy"

# ebpf mode's north-south programs on the nodes (MODE=ebpf only): TC names the node interfaces
# for --bpf-tc-interfaces (here: eth0, the node network), ACCEL is --bpf-acceleration
# (disabled, native or best-effort; XDP needs TC).
TC=${TC:-}
ACCEL=${ACCEL:-disabled}
DSR=${DSR:-}

# run_name prints the name of this PROXY/MODE's results: proxy-mode, with +tc and +xdp (or
# +xdp-best-effort, +dsr) when the nodes run ebpf mode's tc programs, XDP and DSR.
run_name() {
  local name=$PROXY-$MODE
  [[ -z $TC ]] || name+=+tc
  case $ACCEL in
  native) name+=+xdp ;;
  best-effort) name+=+xdp-best-effort ;;
  esac
  [[ -z $DSR ]] || name+=+dsr
  echo "$name"
}

# check_north_south fails unless TC, ACCEL and DSR fit PROXY and MODE.
check_north_south() {
  case $ACCEL in disabled | native | best-effort) ;; *) die "ACCEL must be disabled, native or best-effort" ;; esac
  [[ -z $TC && $ACCEL == disabled && -z $DSR ]] && return 0
  [[ $PROXY == svcproxy && $MODE == ebpf ]] || die "TC, ACCEL and DSR are svcproxy's ebpf mode's (PROXY=$PROXY MODE=$MODE)"
  [[ -n $TC || $ACCEL == disabled ]] || die "ACCEL=$ACCEL needs TC (XDP runs in front of the tc programs)"
  [[ -n $TC || -z $DSR ]] || die "DSR=$DSR needs TC (the tc programs tunnel and decapsulate)"
}

node_ip() { echo "10.210.0.$((10 + $1))"; }   # node N's address on the node network
node_cidr() { echo "10.211.$1.0/24"; }        # node N's pod CIDR
node_name() { echo "$P-node$1"; }

log() { echo "[cluster $(date -u +%T)] $*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# in_ns NS CMD... runs CMD in namespace $P-NS's network namespace (root mount namespace).
in_ns() {
  local ns=$1
  shift
  nsenter --net="/run/netns/$P-$ns" -- "$@"
}

# kc ARGS... is kubectl as cluster admin, run inside svk-cp.
kc() { in_ns cp "$(upstream_bin)/kubectl" --kubeconfig "$RUN/admin.kubeconfig" "$@"; }

# upstream_bin prints the directory of the upstream binaries (built on first use, cached).
upstream_bin() {
  if [[ -z ${UPSTREAM_BIN:-} ]]; then
    UPSTREAM_BIN=$("$HACK/build-upstream.sh" kubelet kube-controller-manager kube-scheduler kubectl)
  fi
  echo "$UPSTREAM_BIN"
}

# bg NAME LOGDIR NS CMD... starts CMD in the background inside $P-NS and records its PID in
# LOGDIR/NAME.pid (nsenter execs CMD, so the PID is CMD's own).
bg() {
  local name=$1 dir=$2 ns=$3
  shift 3
  nsenter --net="/run/netns/$P-$ns" -- "$@" >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}

# stop_pid FILE: TERM the process whose PID FILE holds, KILL it after 5 s, remove FILE.
stop_pid() {
  local f=$1 pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# wait_for SECONDS DESC CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
  local secs=$1 desc=$2 i
  shift 2
  for ((i = 0; i < secs * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "timed out after ${secs}s waiting for $desc"
}
