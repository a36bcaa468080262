#!/usr/bin/env bash
# hack/footprint.sh [BINARY] — svcproxy's fixed memory: what the binary maps, what its package
# inits allocate, and what an idle process holds, split by mapping (docs/performance.md, "How to
# run"). Without BINARY it builds ./cmd/svcproxy as the image does (static).
#
# The idle process runs in a throwaway network namespace with an unreachable API server
# (--master https://127.0.0.1:1), so it only retries; after FOOTPRINT_SECONDS (default 15)
# /proc/PID/smaps is summed per mapping. The binary is read into the page cache first: the
# kernel then maps 64 KiB around each page the process touches (fault-around), the same in
# every run. Root (network namespaces).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
# shellcheck source=lib/netns.sh
source "$HACK/lib/netns.sh"
NS_PREFIX=svfp$$x

log() { echo "[footprint] $*" >&2; }

sections() {
  size -A "$1" | awk -v file="$(stat -c %s "$1")" '
    $1 == ".text" || $1 == ".rodata" || $1 == ".gopclntab" { s[$1] = $2 }
    END { printf "binary: file %.2f MB, .text %.2f MB, .rodata %.2f MB, .gopclntab %.2f MB\n",
          file / 1e6, s[".text"] / 1e6, s[".rodata"] / 1e6, s[".gopclntab"] / 1e6 }'
}

init_heap() {
  GODEBUG=inittrace=1 "$1" --version 2>&1 >/dev/null | awk '
    /^init / { ms += $5; bytes += $8; n++ }
    END { printf "package inits: %d, %.2f MB of heap, %.1f ms\n", n, bytes / 1e6, ms }'
}

# smaps_split PID BINARY: resident MiB of the binary's mappings, other files and anonymous memory.
smaps_split() {
  awk -v exe="$2" '
    /^[0-9a-f]+-[0-9a-f]+ / { kind = "anonymous mappings"
      if ($6 == exe) kind = ($2 == "r-xp") ? "binary text" : ($2 == "r--p") ? "binary rodata+pclntab" : "binary data"
      else if ($6 ~ /^\//) kind = "other files (libc, ld.so)"
      next }
    $1 == "Rss:" { rss[kind] += $2 }
    $1 == "Anonymous:" { anon += $2 }
    END {
      for (k in rss) { printf "  %-28s %6.2f MiB\n", k, rss[k] / 1024; total += rss[k] }
      printf "  total %.2f MiB = file-backed %.2f + anonymous %.2f\n", total / 1024, (total - anon) / 1024, anon / 1024 }
  ' "/proc/$1/smaps"
}

idle() {
  local bin=$1 ns=${NS_PREFIX}idle pid
  ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
  cat "$bin" >/dev/null
  ip netns exec "$ns" "$bin" --master https://127.0.0.1:1 --proxy-mode nftables \
    --hostname-override footprint >/dev/null 2>&1 &
  pid=$!
  sleep "${FOOTPRINT_SECONDS:-15}"
  echo "idle RSS after ${FOOTPRINT_SECONDS:-15} s, API server unreachable:"
  smaps_split "$pid" "$(readlink -f "/proc/$pid/exe")"
  grep -E '^(VmHWM|Threads)' "/proc/$pid/status" | sed 's/^/  /'
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

main() {
  if [[ $(id -u) != 0 ]]; then
    log "ERROR: needs root (network namespaces)"
    return 1
  fi
  trap 'remove_namespaces "$NS_PREFIX" >/dev/null' EXIT
  local bin=${1:-}
  if [[ -z $bin ]]; then
    bin=$ROOT/_output/footprint/svcproxy
    mkdir -p "$(dirname "$bin")"
    (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$bin" ./cmd/svcproxy)
    echo "packages linked: $(cd "$ROOT" && go list -deps ./cmd/svcproxy | wc -l)"
  fi
  bin=$(readlink -f "$bin")
  sections "$bin"
  init_heap "$bin"
  idle "$bin"
}

main "$@"
