#!/usr/bin/env bash
# hack/cluster/controlplane.sh start|stop — the test cluster's control plane inside svk-cp:
# PKI (a CA, serving and client certs, the ServiceAccount key pair), etcd on svk-cp's loopback,
# kube-apiserver on 10.210.0.1:6443 (and 127.0.0.1:6443 inside svk-cp), kube-controller-manager
# and kube-scheduler. Writes $RUN/admin.kubeconfig (system:masters) and one kubeconfig per node.
#
# kube-apiserver and etcd come from hack/build-controlplane.sh; kcm and the scheduler from
# hack/build-upstream.sh. Node pod CIDRs are fixed per node (the kubelet step patches them);
# kcm does not allocate them, so they always match the CNI config and the routes.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOGS=$RUN/cp

# cert NAME SUBJECT [SAN]: a key and a CA-signed cert; with a SAN also usable as a server cert.
cert() {
  local n=$1 subj=$2 san=${3:-}
  [[ -f $PKI/$n.crt ]] && return 0
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$PKI/$n.key" -out "$PKI/$n.csr" 2>/dev/null
  if [[ -n $san ]]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$PKI/$n.ext"
  else
    echo "extendedKeyUsage=clientAuth" >"$PKI/$n.ext"
  fi
  openssl x509 -req -in "$PKI/$n.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 365 -extfile "$PKI/$n.ext" -out "$PKI/$n.crt" 2>/dev/null
}

# kubeconfig OUT USER: client-cert kubeconfig for USER against the API server's bridge address.
kubeconfig() {
  cat >"$1" <<K
apiVersion: v1
kind: Config
clusters: [{name: svk, cluster: {server: "https://$CP_IP:6443", certificate-authority: $PKI/ca.crt}}]
users: [{name: $2, user: {client-certificate: $PKI/$2.crt, client-key: $PKI/$2.key}}]
contexts: [{name: svk, context: {cluster: svk, user: $2}}]
current-context: svk
K
}

pki() {
  mkdir -p "$PKI"
  [[ -f $PKI/ca.crt ]] || openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=svk-ca" \
    -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" "IP:$CP_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=admin"
  local n
  for n in $NODES; do
    cert "node$n" "/O=system:nodes/CN=system:node:$(node_name "$n")" "IP:$(node_ip "$n"),DNS:$(node_name "$n")"
  done
  [[ -f $PKI/sa.key ]] || {
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  }
  kubeconfig "$RUN/admin.kubeconfig" admin
  for n in $NODES; do kubeconfig "$RUN/node$n.kubeconfig" "node$n"; done
}

readyz() {
  in_ns cp curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" https://127.0.0.1:6443/readyz
}

start_etcd_apiserver() {
  local cpbin=$1
  bg etcd "$LOGS" cp "$cpbin/etcd" --name svk --data-dir "$RUN/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster svk=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
  # --kubelet-preferred-address-types InternalIP: node names do not resolve (no DNS outside
  # the cluster), and exec/logs/port-forward go to the kubelet's address.
  bg kube-apiserver "$LOGS" cp "$cpbin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --bind-address 0.0.0.0 --advertise-address "$CP_IP" --secure-port 6443 \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
    --authorization-mode Node,RBAC --service-cluster-ip-range "$SVC_CIDR" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --allow-privileged=true --profiling=false --v=1
}

start() {
  mkdir -p "$LOGS"
  pki
  local cpbin ubin t0=$SECONDS
  cpbin=$("$HACK/build-controlplane.sh")
  ubin=$(upstream_bin)
  start_etcd_apiserver "$cpbin"
  wait_for 120 "kube-apiserver /readyz" readyz
  log "kube-apiserver ready after $((SECONDS - t0)) s"
  bg kube-controller-manager "$LOGS" cp "$ubin/kube-controller-manager" --kubeconfig "$RUN/admin.kubeconfig" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" --use-service-account-credentials=true \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --cluster-cidr "$CLUSTER_CIDR" --service-cluster-ip-range "$SVC_CIDR" --allocate-node-cidrs=false \
    --leader-elect=false --bind-address 127.0.0.1 --v=1
  bg kube-scheduler "$LOGS" cp "$ubin/kube-scheduler" --kubeconfig "$RUN/admin.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --v=1
}

stop() {
  local c
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "$LOGS/$c.pid"; done
}

case ${1:-} in
start) start ;;
stop) stop ;;
*) die "usage: $0 start|stop" ;;
esac
