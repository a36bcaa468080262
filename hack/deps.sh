#!/usr/bin/env bash
# hack/deps.sh [cluster] — install the Debian packages that the tests, the demo and the
# benchmarks need, idempotently: nothing happens when all are present; `apt-get update` runs
# only when something is missing. Needs root (the tests need root anyway).
# `cluster` adds what the real test cluster (hack/cluster.sh) runs on its nodes: containerd,
# runc and the CNI plugins (bridge, host-local, portmap).
set -euo pipefail

# Binary each package provides, to check for it cheaply; package name → binary.
declare -A PKGS=(
  [nftables]=nft
  [iptables]=iptables
  [ipset]=ipset
  [conntrack]=conntrack
  [iproute2]=ip
  [socat]=socat
  [openssl]=openssl
  [curl]=curl
  [ca-certificates]=update-ca-certificates
  [procps]=sysctl
  [kmod]=modprobe
  [make]=make
  [git]=git
  [ethtool]=ethtool # GRO on the peers of links XDP sends out of (e2e ebpf+xdp, cluster ACCEL)
)
if [[ ${1:-} == cluster ]]; then
  PKGS+=([containerd]=containerd [runc]=runc [containernetworking-plugins]=/usr/lib/cni/bridge [gcc]=gcc [jq]=jq)
fi

log() { echo "[deps] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

missing_packages() {
  local p
  for p in "${!PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      echo "$p"
    elif [[ ${PKGS[$p]} == /* ]]; then
      [[ -x ${PKGS[$p]} ]] || echo "$p"
    elif ! command -v "${PKGS[$p]}" >/dev/null 2>&1 && [[ ! -x /usr/sbin/${PKGS[$p]} && ! -x /sbin/${PKGS[$p]} ]]; then
      echo "$p"
    fi
  done | sort
}

check_go() {
  command -v go >/dev/null || die "go is not on PATH; install Go $(awk '$1=="go"{print $2}' "$(dirname "$0")/../go.mod") or newer"
}

main() {
  check_go
  local missing
  missing=$(missing_packages)
  if [[ -z $missing ]]; then
    log "all packages present"
    return 0
  fi
  [[ $(id -u) == 0 ]] || die "missing packages ($(echo $missing)) and not root: install them as root"
  log "installing: $(echo $missing)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || die "apt-get update failed"
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >&2 || die "apt-get install failed"
  missing=$(missing_packages)
  [[ -z $missing ]] || die "still missing after install: $(echo $missing)"
  log "installed"
}

main
