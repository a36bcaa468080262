#!/usr/bin/env bash
# hack/cluster/node.sh start|stop N — worker node svk-nodeN: containerd (Debian's, with runc)
# and kubelet v1.37.1, both inside netns svk-nodeN, each with its own state under $RUN/nodeN.
#
# Settings this machine kind needs (found the hard way, see the header of hack/cluster.sh):
#   - no CAP_SYS_RESOURCE: runc cannot lower oom_score_adj → containerd restrict_oom_score_adj
#     and kubelet oomScoreAdj 0;
#   - cgroup v1 → kubelet failCgroupV1 false, cgroupfs driver, cgroupRoot /svk-nodeN (pre-created
#     in every hierarchy) so that the two kubelets do not share /kubepods;
#   - the pod sandbox image is our pause build (kubelet 1.37 no longer passes it to the CRI).
# `stop` kills the pods' processes too (shims outlive containerd; their children are
# re-parented to PID 1), unmounts everything under the node's state dir and removes its cgroups.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=ebpf.sh
source "$(dirname "${BASH_SOURCE[0]}")/ebpf.sh"
N=${2:-}
[[ $N =~ ^[0-9]+$ ]] || die "usage: $0 start|stop N"
D=$RUN/node$N
NAME=$(node_name "$N")
SOCK=$D/containerd/containerd.sock

containerd_config() {
  cat >"$D/containerd/config.toml" <<T
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.2"
  enable_selinux = false
  # no CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below its own ("failed to update
  # /proc/self/oom_score_adj: Permission denied" for every sandbox) → clamp instead
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$D/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
T
  # bridge + host-local on the node's pod CIDR; no masquerade (the proxy decides that), hairpin
  # for pods reaching themselves through a Service; portmap for hostPort pods.
  cat >"$D/cni/net.d/10-svk.conflist" <<J
{"cniVersion":"0.4.0","name":"$NAME","plugins":[
 {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","dataDir":"$D/cni/ipam","ranges":[[{"subnet":"$(node_cidr "$N")"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}
]}
J
}

kubelet_config() {
  echo "nameserver $DNS_IP" >"$RUN/resolv.conf"
  cat >"$D/kubelet/config.yaml" <<Y
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$NAME
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://$SOCK
address: $(node_ip "$N")
healthzBindAddress: 127.0.0.1
podLogsDir: $D/pod-logs
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $PKI/ca.crt}}
authorization: {mode: AlwaysAllow}
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: $RUN/resolv.conf
tlsCertFile: $PKI/node$N.crt
tlsPrivateKeyFile: $PKI/node$N.key
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
maxPods: 60
Y
}

ctr_() { ctr -a "$SOCK" -n k8s.io "$@"; }

# import_images loads every archive of $IMAGES (images.sh): docker archives, and svcproxy's
# OCI archive whose index names the image for containerd.
import_images() {
  local f
  for f in "$IMAGES"/*.tar; do
    [[ -e $f ]] || continue
    ctr_ images import "$f" >/dev/null ||
      die "importing $f into $NAME's containerd failed"
  done
}

register() {
  local curl=(in_ns cp curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key")
  wait_for 60 "node $NAME to register" "${curl[@]}" "https://127.0.0.1:6443/api/v1/nodes/$NAME"
  "${curl[@]}" -X PATCH -H 'Content-Type: application/strategic-merge-patch+json' \
    "https://127.0.0.1:6443/api/v1/nodes/$NAME" \
    -d "{\"spec\":{\"podCIDR\":\"$(node_cidr "$N")\",\"podCIDRs\":[\"$(node_cidr "$N")\"]}}" >/dev/null
}

start() {
  local t0=$SECONDS c cg pre=()
  mkdir -p "$D/containerd" "$D/cni/net.d" "$D/kubelet" "$D/pod-logs"
  containerd_config
  kubelet_config
  for c in $CGROUPS; do mkdir -p "/sys/fs/cgroup/$c/$NAME"; done
  # ebpf mode: containerd and kubelet (and so every pod) in the node's cgroup v2 directory
  if [[ ${MODE:-} == ebpf ]]; then
    cg=$(ebpf_node_up "$NAME")
    pre=(sh -c "$CGROUP_EXEC" "$cg")
  fi
  bg containerd "$D" "node$N" "${pre[@]}" containerd --config "$D/containerd/config.toml"
  wait_for 30 "$NAME's containerd socket" test -S "$SOCK"
  import_images
  log "$NAME: containerd up, images imported after $((SECONDS - t0)) s"
  bg kubelet "$D" "node$N" "${pre[@]}" "$(upstream_bin)/kubelet" --config "$D/kubelet/config.yaml" \
    --kubeconfig "$RUN/node$N.kubeconfig" --root-dir "$D/kubelet/root" \
    --hostname-override "$NAME" --node-ip "$(node_ip "$N")" --v=1
  register
  log "$NAME: kubelet registered after $((SECONDS - t0)) s"
}

# kill_cgroup_tasks kills every process left in the node's pids cgroup tree (orphaned containers).
kill_cgroup_tasks() {
  local pids
  for _ in 1 2 3 4 5; do
    pids=$(find "/sys/fs/cgroup/pids/$NAME" -name tasks -exec cat {} + 2>/dev/null | sort -u) || true
    [[ -z $pids ]] && return 0
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.5
  done
}

stop() {
  local t p m c
  stop_pid "$D/kubelet.pid"
  if [[ -S $SOCK ]] && pgrep -f "containerd --config $D/containerd/config.toml" >/dev/null; then
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$t" 2>/dev/null || true; done
  fi
  stop_pid "$D/containerd.pid"
  # a killed run leaves no PID file we can trust: find our containerd and shims by their paths
  for p in $(pgrep -f "containerd --config $D/containerd/config.toml" || true) \
    $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" || true); do
    kill -9 "$p" 2>/dev/null || true
  done
  kill_cgroup_tasks
  ebpf_node_down "$NAME"
  for m in $(awk -v d="$D/" 'index($2,d)==1{print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  for c in $CGROUPS unified; do
    [[ -d /sys/fs/cgroup/$c/$NAME ]] && find "/sys/fs/cgroup/$c/$NAME" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  rm -rf "$D/runc"
}

case ${1:-} in
start) start ;;
stop) stop ;;
*) die "usage: $0 start|stop N" ;;
esac
