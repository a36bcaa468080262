#!/usr/bin/env bash
# hack/bench-e2e.sh (`make bench-e2e`) — svcproxy's end-to-end scale benchmark (test/e2e/bench,
# build tag benche2e): 10,000 Services × 10 endpoints created through a real kube-apiserver, then
# for each run and mode (runs alternate between the modes) a fresh one-node cluster (namespaces
# prefix svb…-) started from a copy of the seeded etcd, the proxy started against it, and
# measured: start → first sync holding every Service (checked in a kernel dump), the proxy's CPU
# and peak RSS (children included), an EndpointSlice churn timed from each API write to the new
# endpoint's new-element notification from the kernel (a netlink listener on the nf_tables group in
# the node's namespace: what `nft monitor` reads), with the proxy's CPU seconds, and a restart with
# nothing changed (time to its first sync, kernel change notifications). Prints one table (median
# [min … max], its target from docs/performance.md, every run) and writes
# _output/bench-e2e/results-<time>.json. It asserts nothing.
#
# The seeded etcd data dir is cached in _output/bench-e2e/seed-v<N>-<S>x<E>-<control plane build>/:
# the first run creates it through the API (1–2.5 min at 10k; the API server's ClusterIP
# allocator is O(n) per Service, static IPs included), later runs start from a copy in seconds.
# Past BENCH_E2E_SEED_API Services (10000) the seed holds only those; the rest are copies of
# Service 0's stored objects (Service, EndpointSlice, IPAddress) written into each run's etcd
# once its kube-apiserver is up (minutes at 100k, not an hour through the API): an apiserver
# started over 100k Services must finish its first IP and port repair pass within a minute or
# exit. `make bench-100k` is the 100k run. Root; builds what it
# needs (hack/build-controlplane.sh, svcproxy with its commit stamped). Not part of make test.
#
# Then, after the churn, the datapath: a server pod behind a new ClusterIP Service on the node and,
# from a client pod behind the same node (its process in the node's cgroup, where ebpf mode's hooks
# see it), new TCP connections (+ one request each) per second with BENCH_E2E_DP_CONNS in flight for
# BENCH_E2E_DP_DURATION (e2ectl rate); with the control plane stopped, the same through the ClusterIP
# and direct to the pod's IP (the reference), and a window of one connection in flight each way for
# BENCH_E2E_DP_LATENCY (p50/p99 of connect → answer); per window the machine's kernel CPU
# (/proc/stat system+irq+softirq, per 100k connections) and the NAT'ed conntrack entries in the
# node's namespace (flushed before each window); and a full sync with nothing changed, forced by a
# change of the Node's zone label (svcproxy and upstream both answer it with the full sync of their
# hourly resync): kernel change notifications (target 0) and the proxy's CPU.
# In ebpf mode start and churn are also timed at the socket hooks' maps, which serve a connect
# before the nftables half of the same sync is done: start → every ClusterIP found in the pinned
# services map (read-only, in the same quiet moment as the rules' dump) with svcproxy's own
# svcproxy_sync_connect_time_last_timestamp_seconds, and API write → maps from
# svcproxy_connect_time_programming_duration_seconds over the churn (millisecond buckets,
# interpolated; the mean exact); the issue's targets are judged there, and the whole sync and the
# nftables half's notification are printed beside them. The restart also prints
# svcproxy_ebpf_map_writes_total of the new process (target 0), and memory adds the memlock of the
# BPF maps the proxy holds (/proc/PID/fdinfo). When ebpf is among the modes, a summary of the
# eBPF issue's figures follows the table: each mode's median side by side, ebpf's target, met.
#
# Knobs: BENCH_E2E_MODES (nftables; separated by spaces or commas; also iptables, ebpf, upstream-nftables, upstream-iptables: upstream
#        kube-proxy v1.37.1 from hack/build-upstream.sh, and baseline-nftables, baseline-iptables:
#        the svcproxy binary BENCH_E2E_BASELINE, e.g. main's, for before/after in one session;
#        BENCH_E2E_BASELINE_CONFIG: KubeProxyConfiguration lines added for the baseline modes only,
#        e.g. $'featureGates:\n  WatchListClient: false\n' with BENCH_E2E_BASELINE=$PWD/_output/bench-e2e/svcproxy
#        (this invocation's own build: the same binary with another setting)),
#        BENCH_E2E_RUNS (5), BENCH_E2E_SERVICES (10000), BENCH_E2E_ENDPOINTS (10),
#        past 65,000 Services the clusters' IPv4 service range is 10.96.0.0/12 instead of the /16,
#        BENCH_E2E_CHANGES (6000), BENCH_E2E_RATE (100 updates/s: a minute),
#        BENCH_E2E_MIN_SYNC (minSyncPeriod, 1ms: a sync per change; 0s in a config file means
#        the default 1s, upstream's defaulting too), BENCH_E2E_TIMEOUT (go test -timeout, 120m),
#        BENCH_E2E_SEED_API (10000), BENCH_E2E_DP_CONNS (16), BENCH_E2E_DP_DURATION (10s; 0s: no
#        datapath), BENCH_E2E_DP_LATENCY (5s; 0s: no latency windows), BENCH_E2E_DP_REF (the 1k
#        run's connections/s: the 50k target is 90 % of it),
#        BENCH_E2E_DP_PAUSED (true: a second datapath window with etcd and kube-apiserver stopped),
#        BENCH_E2E_DP_PERF (true: perf record -a -g of that window, perf-datapath.data in the cluster's dir),
#        BENCH_E2E_DP_REF_SERVICES (1000 at 50k and 100k, else 0: before each round of runs and after the last, the datapath alone
#        on a cluster of that many Services, in the first mode's mode, the ratio's reference measured in the same invocation),
#        BENCH_E2E_IDLE_SHARE (0.9) and BENCH_E2E_IDLE_WAIT (1m): before a start and a restart, wait
#        until the machine was that idle over one second, at most that long (0: no wait),
#        BENCH_E2E_LIST_FLOORS (true: after each run, a decode-only client's initial lists timed four ways),
#        BENCH_E2E_START_TIMEOUT (15m: the limit for a first sync, for the proxy to go quiet and for the kernel dump after it;
#        upstream iptables mode needs more at 10k), SVCPROXY_BIN (measure this binary), BENCH_E2E_UPSTREAM (this kube-proxy binary),
#        BENCH_E2E_PROFILE (true: the proxy runs with enableProfiling and its heap profiles —
#        live and allocated since start, after a GC — are kept in _output/e2e/<cluster>/:
#        heap-first.pprof once every ClusterIP is programmed, heap-churned.pprof after the
#        churn (its alloc_space minus heap-first's is what the churn allocated: pprof
#        -diff_base), heap-restarted.pprof after the unchanged restart, cpu-churn.pprof: a CPU
#        profile of the churn (/debug/pprof/profile for CHANGES/RATE + 2 s); and svcproxy built with
#        -tags startprofile writes a CPU profile of each process's first
#        SVCPROXY_START_CPUPROFILE_SECONDS (6) to _output/bench-e2e/profiles/cpu-start-<pid>.pprof).
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
  local tags=()
  # A CPU profile from the process's start (cmd/svcproxy/startprofile.go).
  [[ ${BENCH_E2E_PROFILE:-false} != true ]] || tags=(-tags startprofile)
  # Static, as the image builds it: a cgo build also maps libc and the dynamic loader
  # (more RSS than what ships: `make footprint` shows the difference).
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath "${tags[@]}" -o "$OUT/svcproxy" \
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
  local modes=${BENCH_E2E_MODES:-nftables} upstream=${BENCH_E2E_UPSTREAM:-}
  if [[ $modes == *upstream-* && -z $upstream ]]; then
    upstream=$("$HACK/build-upstream.sh" kube-proxy)/kube-proxy || { log "ERROR: building kube-proxy failed"; return 1; }
  fi
  [[ -z $upstream ]] || log "upstream: $upstream — $("$upstream" --version 2>&1 | head -1)"
  [[ -z ${BENCH_E2E_BASELINE:-} ]] || log "baseline: $BENCH_E2E_BASELINE — $("$BENCH_E2E_BASELINE" --version 2>&1 | head -1)"
  local args=(
    -modes "$modes" -runs "${BENCH_E2E_RUNS:-5}"
    -services "${BENCH_E2E_SERVICES:-10000}" -endpoints "${BENCH_E2E_ENDPOINTS:-10}"
    -changes "${BENCH_E2E_CHANGES:-6000}" -rate "${BENCH_E2E_RATE:-100}"
    -min-sync-period "${BENCH_E2E_MIN_SYNC:-1ms}"
    -upstream "$upstream" -baseline "${BENCH_E2E_BASELINE:-}" -baseline-config "${BENCH_E2E_BASELINE_CONFIG:-}"
    -profile="${BENCH_E2E_PROFILE:-false}" -start-timeout "${BENCH_E2E_START_TIMEOUT:-15m}"
    -idle-share "${BENCH_E2E_IDLE_SHARE:-0.9}" -idle-wait "${BENCH_E2E_IDLE_WAIT:-1m}"
  )
  # Seeding past 10k, datapath and full sync; see the header.
  # At 50k the datapath target is a ratio to 1k: measured in the same invocation.
  local dp_ref_default=0
  [[ ${BENCH_E2E_SERVICES:-10000} -lt 50000 ]] || dp_ref_default=1000
  args+=(
    -seed-api "${BENCH_E2E_SEED_API:-10000}"
    -dp-conns "${BENCH_E2E_DP_CONNS:-16}" -dp-duration "${BENCH_E2E_DP_DURATION:-10s}"
    -dp-latency-duration "${BENCH_E2E_DP_LATENCY:-5s}"
    -dp-reference "${BENCH_E2E_DP_REF:-0}" -dp-paused="${BENCH_E2E_DP_PAUSED:-true}"
    -dp-perf="${BENCH_E2E_DP_PERF:-false}"
    -dp-ref-services "${BENCH_E2E_DP_REF_SERVICES:-$dp_ref_default}"
    -list-floors="${BENCH_E2E_LIST_FLOORS:-true}"
  )
  # After the --version calls above: each process writes its own profile.
  if [[ ${BENCH_E2E_PROFILE:-false} == true ]]; then
    mkdir -p "$OUT/profiles"
    export SVCPROXY_START_CPUPROFILE=$OUT/profiles/cpu-start-%d.pprof
    log "start CPU profiles (first ${SVCPROXY_START_CPUPROFILE_SECONDS:-6} s of each svcproxy process): $OUT/profiles/"
  fi
  # The harness's kernel observer must not outlive its phase: a listener left in any
  # namespace makes every later start's kernel build a notification per element.
  (cd "$ROOT/test/e2e" && go test -tags benche2e -count=1 -run TestKernelObserverLeavesNoListener ./bench) || {
    log "ERROR: the kernel observer leaves a listener behind; the starts would be measured slower"; return 1; }
  log "go test -tags benche2e -run TestBenchE2E ./bench -args ${args[*]} (in test/e2e)"
  t0=$SECONDS
  local rc=0
  (cd "$ROOT/test/e2e" && go test -tags benche2e -count=1 -timeout "${BENCH_E2E_TIMEOUT:-120m}" \
    -run TestBenchE2E -v ./bench -args "${args[@]}") || rc=$?
  log "bench-e2e took $((SECONDS - t0)) s, exit $rc; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
  return "$rc"
}

main "$@"
