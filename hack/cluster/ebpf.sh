# hack/cluster/ebpf.sh — what a node of the test cluster owns in ebpf mode (MODE=ebpf); sourced
# by hack/cluster.sh and node.sh after lib.sh. The same arrangement as test/e2e/framework's:
#
#   - a cgroup v2 directory per node, $(cgroup2_root)/$P-nodeN, the only cgroup the node's
#     svcproxy attaches its hooks to. The node's containerd and kubelet start in its child
#     `node`; every pod follows: a shim inherits containerd's cgroup, and runc on a hybrid host
#     also puts each container at the path it gets in the v1 hierarchies, under kubelet's
#     cgroupRoot /$P-nodeN, so in this directory as well. Nothing else of the machine is in it.
#   - a bpffs per node at $RUN/bpf/$P-nodeN for the pins, apart from the machine's /sys/fs/bpf.
#
# cgroup2_root is the machine's cgroup v2 mount (/sys/fs/cgroup/unified on a hybrid host); with
# none, a cgroup2 mount of our own at $CL/cgroup2, which `down` removes. Every cgroup2 mount
# shows the same hierarchy, so the directory's name carries the prefix.
# shellcheck shell=bash

BPF_PINS=$RUN/bpf
OWN_CGROUP2=$CL/cgroup2

# cgroup2_root prints the cgroup v2 mount to use, mounting our own when the machine has none
# (with "find", it only looks, and prints nothing then).
cgroup2_root() {
  local m
  m=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
  if [[ -n $m || ${1:-} == find ]]; then
    echo "$m"
    return 0
  fi
  mkdir -p "$OWN_CGROUP2"
  mount -t cgroup2 none "$OWN_CGROUP2" || die "mounting cgroup2 at $OWN_CGROUP2 failed"
  echo "$OWN_CGROUP2"
}

# ebpf_node_up NAME creates node NAME's cgroup (with its child `node`) and bpffs; it prints the
# cgroup directory that containerd and kubelet start in.
ebpf_node_up() {
  local name=$1 cg
  cg=$(cgroup2_root)/$name
  mkdir -p "$cg/node" "$BPF_PINS/$name"
  mountpoint -q "$BPF_PINS/$name" || mount -t bpf none "$BPF_PINS/$name" ||
    die "mounting a bpffs at $BPF_PINS/$name failed"
  echo "$cg/node"
}

# CGROUP_EXEC, run as `sh -c "$CGROUP_EXEC" DIR CMD...`, moves itself into cgroup DIR and execs
# CMD there, so that CMD and its children start in DIR.
# shellcheck disable=SC2016 # expanded by that shell
CGROUP_EXEC='echo $$ >"$0/cgroup.procs" && exec "$@"'

# ebpf_node_down NAME kills what is left in node NAME's cgroup, removes it and unmounts its
# bpffs (the pins, and with them the hooks, go with the mount). Whatever MODE: `down` must
# clean up after any run.
ebpf_node_down() {
  local name=$1 root cg pids
  root=$(cgroup2_root find)
  cg=$root/$name
  if [[ -n $root && -d $cg ]]; then
    for _ in 1 2 3 4 5; do
      pids=$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u) || true
      [[ -z $pids ]] && break
      # shellcheck disable=SC2086 # one PID per word
      kill -9 $pids 2>/dev/null || true
      sleep 0.5
    done
    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d $cg ]] && log "WARNING: cgroup $cg could not be removed"
  fi
  if mountpoint -q "$BPF_PINS/$name" 2>/dev/null; then
    umount "$BPF_PINS/$name" || umount -l "$BPF_PINS/$name" || true
  fi
  rmdir "$BPF_PINS/$name" 2>/dev/null || true
}

# ebpf_cluster_down unmounts our own cgroup2 mount, once no node has a cgroup left under it.
ebpf_cluster_down() {
  rmdir "$BPF_PINS" 2>/dev/null || true
  if mountpoint -q "$OWN_CGROUP2" 2>/dev/null; then
    umount "$OWN_CGROUP2" || log "WARNING: $OWN_CGROUP2 could not be unmounted"
  fi
  rmdir "$OWN_CGROUP2" 2>/dev/null || true
}
