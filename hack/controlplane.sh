#!/usr/bin/env bash
# hack/controlplane.sh — run a real etcd + kube-apiserver for tests and the demo
# (no kubelet, no controller-manager, no scheduler) and write kubeconfigs.
#
#   hack/controlplane.sh start    start both, wait for /readyz, write kubeconfigs
#   hack/controlplane.sh stop     stop both (by the PIDs recorded at start)
#   hack/controlplane.sh status
#
# By default both listen on 127.0.0.1 of the root namespace. With CP_NETNS=<netns> both run
# inside that network namespace instead (etcd on its loopback, kube-apiserver on KAS_BIND,
# an address that must exist only inside the test namespaces).
#
# Environment knobs (all optional):
#   CP_BIN        dir with kube-apiserver and etcd     (default: output of hack/build-controlplane.sh)
#   CP_RUN        state dir (certs, etcd data, logs)   (default _output/controlplane/run)
#   CP_NETNS      network namespace to run both in     (default: none)
#   KAS_BIND      kube-apiserver bind/advertise address (default 127.0.0.1)
#   KAS_PORT      kube-apiserver secure port           (default 16443)
#   ETCD_PORT     etcd client port (peer = +1)         (default 12379)
#   SVC_CIDR      --service-cluster-ip-range           (default 10.96.0.0/16)
#   KAS_EXTRA     extra kube-apiserver flags
#   KEEP_DATA=1   keep the etcd data dir of the previous run (default: wiped)
#   SEED_DIR      copy this etcd data dir in before starting
#
# Writes $CP_RUN/admin.kubeconfig (client cert, system:masters), $CP_RUN/admin-token.kubeconfig
# and $CP_RUN/kube-proxy.kubeconfig (token of user system:kube-proxy, which the bootstrap
# ClusterRoleBinding system:node-proxier authorises like kube-proxy).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
RUN=${CP_RUN:-$ROOT/_output/controlplane/run}
CP_NETNS=${CP_NETNS:-}
KAS_BIND=${KAS_BIND:-127.0.0.1}
KAS_PORT=${KAS_PORT:-16443}
ETCD_PORT=${ETCD_PORT:-12379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
SVC_CIDR=${SVC_CIDR:-10.96.0.0/16}
KAS_EXTRA=${KAS_EXTRA:-}

log() { echo "[controlplane] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# inns CMD... runs CMD in CP_NETNS when set, else directly. It execs, so that `inns CMD &`
# records the PID of CMD itself, not of a subshell.
inns() {
  if [[ -n $CP_NETNS ]]; then exec ip netns exec "$CP_NETNS" "$@"; else exec "$@"; fi
}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_one() {
  local name=$1 f=$RUN/$1.pid pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
  rm -f "$f"
}

stop() {
  stop_one kube-apiserver
  stop_one etcd
}

status() {
  local c
  for c in etcd kube-apiserver; do
    if alive "$RUN/$c.pid"; then
      echo "$c running pid $(cat "$RUN/$c.pid") rss_kib $(ps -o rss= -p "$(cat "$RUN/$c.pid")" | tr -d ' ')"
    else
      echo "$c not running"
    fi
  done
}

resolve_bin() {
  if [[ -z ${CP_BIN:-} ]]; then
    CP_BIN=$("$HACK/build-controlplane.sh") || die "building the control plane failed"
  fi
  ETCD_BIN=${ETCD_BIN:-$CP_BIN/etcd}
  KAS_BIN=${KAS_BIN:-$CP_BIN/kube-apiserver}
  [[ -x $ETCD_BIN ]] || die "no etcd binary at $ETCD_BIN (run hack/build-controlplane.sh)"
  [[ -x $KAS_BIN ]] || die "no kube-apiserver binary at $KAS_BIN (run hack/build-controlplane.sh)"
}

gen_pki() {
  local p=$RUN/pki
  # The serving cert's SANs depend on KAS_BIND: regenerate when it changed.
  if [[ -f $p/ca.crt && -f $p/bind && $(cat "$p/bind") == "$KAS_BIND" ]]; then return 0; fi
  rm -rf "$p"
  mkdir -p "$p"
  log "generating PKI in $p"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=svcproxy-test-ca" \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$p/apiserver.key" -out "$p/apiserver.csr" 2>/dev/null
  local first_svc_ip
  first_svc_ip=$(echo "${SVC_CIDR%%,*}" | awk -F'[./]' '{printf "%d.%d.%d.%d", $1, $2, $3, $4 + 1}')
  printf 'subjectAltName=IP:127.0.0.1,IP:%s,IP:%s,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' \
    "$KAS_BIND" "$first_svc_ip" >"$p/apiserver.ext"
  openssl x509 -req -in "$p/apiserver.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -days 3650 -extfile "$p/apiserver.ext" -out "$p/apiserver.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=admin" \
    -keyout "$p/admin.key" -out "$p/admin.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$p/client.ext"
  openssl x509 -req -in "$p/admin.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -days 3650 -extfile "$p/client.ext" -out "$p/admin.crt" 2>/dev/null
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  {
    echo "$(openssl rand -hex 16),admin,admin-uid,system:masters"
    echo "$(openssl rand -hex 16),system:kube-proxy,kube-proxy-uid,"
  } >"$p/tokens.csv"
  echo "$KAS_BIND" >"$p/bind"
}

write_kubeconfig() { # file user line...
  local out=$1 user=$2 l
  shift 2
  {
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: svcproxy-test
  cluster:
    server: https://$KAS_BIND:$KAS_PORT
    certificate-authority: $RUN/pki/ca.crt
contexts:
- name: svcproxy-test
  context:
    cluster: svcproxy-test
    user: $user
current-context: svcproxy-test
users:
- name: $user
  user:
EOF
    for l in "$@"; do echo "    $l"; done
  } >"$out"
}

fail_start() {
  log "$1 — last lines of $2:"
  tail -30 "$2" >&2 || true
  stop
  exit 1
}

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

start_etcd() {
  local unsafe=""
  "$ETCD_BIN" --help 2>&1 | grep -q -- '--unsafe-no-fsync' && unsafe="--unsafe-no-fsync"
  if [[ ${KEEP_DATA:-0} != 1 ]]; then rm -rf "$RUN/etcd-data"; fi
  if [[ -n ${SEED_DIR:-} ]]; then
    # The contents, not the path: a SEED_DIR that is a symlink to a cached
    # seed was copied as the link, and etcd then wrote into the cache.
    rm -rf "$RUN/etcd-data"
    mkdir -p "$RUN/etcd-data"
    chmod 700 "$RUN/etcd-data"
    cp -a "$SEED_DIR/." "$RUN/etcd-data/"
  fi
  # shellcheck disable=SC2086
  inns "$ETCD_BIN" \
    --name svcproxy-test \
    --data-dir "$RUN/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "svcproxy-test=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state new \
    --quota-backend-bytes 4294967296 \
    --log-level warn $unsafe \
    >"$RUN/etcd.log" 2>&1 &
  echo $! >"$RUN/etcd.pid"
  local i
  for i in $(seq 1 600); do
    (inns curl -sf "http://127.0.0.1:$ETCD_PORT/health") >/dev/null 2>&1 && return 0
    alive "$RUN/etcd.pid" || fail_start "etcd died" "$RUN/etcd.log"
    sleep 0.05
  done
  fail_start "etcd not healthy after 30 s" "$RUN/etcd.log"
}

start_kube_apiserver() {
  local p=$RUN/pki reconciler=none
  # The lease reconciler refuses loopback advertise addresses; elsewhere it gives the
  # default/kubernetes Service real endpoints, like a real cluster.
  [[ $KAS_BIND == 127.* ]] || reconciler=lease
  # shellcheck disable=SC2086
  inns "$KAS_BIN" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$KAS_BIND" \
    --advertise-address "$KAS_BIND" \
    --secure-port "$KAS_PORT" \
    --tls-cert-file "$p/apiserver.crt" \
    --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" \
    --token-auth-file "$p/tokens.csv" \
    --authorization-mode RBAC \
    --service-cluster-ip-range "$SVC_CIDR" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" \
    --service-account-signing-key-file "$p/sa.key" \
    --disable-admission-plugins ServiceAccount \
    --endpoint-reconciler-type "$reconciler" \
    --allow-privileged=true \
    --profiling=false \
    --v=1 $KAS_EXTRA \
    >"$RUN/kube-apiserver.log" 2>&1 &
  echo $! >"$RUN/kube-apiserver.pid"
  local tok i
  tok=$(awk -F, '$2=="admin"{print $1}' "$p/tokens.csv")
  for i in $(seq 1 1200); do
    if (inns curl -sf --cacert "$p/ca.crt" -H "Authorization: Bearer $tok" \
      "https://$KAS_BIND:$KAS_PORT/readyz") >/dev/null 2>&1; then return 0; fi
    alive "$RUN/kube-apiserver.pid" || fail_start "kube-apiserver died" "$RUN/kube-apiserver.log"
    sleep 0.05
  done
  fail_start "kube-apiserver not ready after 60 s" "$RUN/kube-apiserver.log"
}

start() {
  command -v openssl >/dev/null || die "openssl is missing (run hack/deps.sh)"
  command -v curl >/dev/null || die "curl is missing (run hack/deps.sh)"
  if [[ -n $CP_NETNS ]]; then
    ip netns exec "$CP_NETNS" true 2>/dev/null || die "network namespace $CP_NETNS does not exist"
  elif [[ $KAS_BIND != 127.* ]]; then
    die "KAS_BIND=$KAS_BIND outside a namespace: the test API server listens on loopback only"
  fi
  resolve_bin
  mkdir -p "$RUN"
  stop
  # Interrupted half way: leave nothing running.
  trap 'log "interrupted"; stop; exit 130' INT TERM
  gen_pki
  local t0 t1 t2
  t0=$EPOCHREALTIME
  start_etcd
  t1=$EPOCHREALTIME
  log "etcd healthy after $(elapsed "$t0" "$t1") s (pid $(cat "$RUN/etcd.pid"))"
  start_kube_apiserver
  t2=$EPOCHREALTIME
  log "kube-apiserver ready at https://$KAS_BIND:$KAS_PORT${CP_NETNS:+ (netns $CP_NETNS)} after $(elapsed "$t1" "$t2") s (total $(elapsed "$t0" "$t2") s, pid $(cat "$RUN/kube-apiserver.pid"))"

  local p=$RUN/pki admin_tok proxy_tok
  admin_tok=$(awk -F, '$2=="admin"{print $1}' "$p/tokens.csv")
  proxy_tok=$(awk -F, '$2=="system:kube-proxy"{print $1}' "$p/tokens.csv")
  write_kubeconfig "$RUN/admin.kubeconfig" admin "client-certificate: $p/admin.crt" "client-key: $p/admin.key"
  write_kubeconfig "$RUN/admin-token.kubeconfig" admin "token: $admin_tok"
  write_kubeconfig "$RUN/kube-proxy.kubeconfig" system:kube-proxy "token: $proxy_tok"
  log "kubeconfigs: $RUN/admin.kubeconfig, $RUN/kube-proxy.kubeconfig"
  trap - INT TERM
}

case ${1:-start} in
start) start ;;
stop) stop ;;
status) status ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
