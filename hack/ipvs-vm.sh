#!/usr/bin/env bash
# hack/ipvs-vm.sh — run the IPVS backend's real-kernel tests inside a throwaway qemu VM.
# This machine's kernel has no IPVS; the VM boots Debian's stock kernel (downloaded with
# apt-get download, unpacked, never installed) under TCG with a busybox initramfs, no NIC
# (-nic none: nothing in the VM can reach anything outside it), and runs the static test
# binaries built with -tags ipvsvm from every package that has *_vm_test.go files
# (pkg/pipeline/backends/ipvs: the backend and its kernel clients; pkg/pipeline/syncer: the quarantine over
# the real IPVS backend; internal/leftovers: mode switches to and from IPVS). Each package
# is its own binary, so the import rules stay those of the package (pkg/ imports nothing
# under internal/). See shared/reference/ipvs-vm.md.
#
# usage: hack/ipvs-vm.sh [REGEX]     go test -run REGEX in every package (default: ^TestVM,
#                                    the tests in */*_vm_test.go; the packages' other tests
#                                    run on the host)
#        hack/ipvs-vm.sh --bench     the sync benchmark (test/bench/ipvs): IPVS vs nftables
#
# Boots one VM per guest kernel the packages ask for: Debian's stock kernel of the release,
# unless a package's *_vm_test.go says "// ipvs-vm kernel: META" (a Debian meta package, e.g.
# linux-image-6.12-amd64 for tests that need tc links). After each boot it prints the verbose
# go test output, then "ipvs-vm (KERNEL): N passed, N failed, N skipped".
# Exits 0 only if every test passed AND the VM's verdict came back as qemu exit 33.
#
# env: IPVS_VM_TIMEOUT (s, default 2400)   IPVS_VM_MEM (MiB, default 1024)
#      IPVS_VM_PKGS (package dirs to build, e.g. "pkg/pipeline/syncer"; default: every dir
#                    with a *_vm_test.go file)
#      IPVS_VM_TEST_TIMEOUT (go test -timeout of each package, default 1200s)
#      IPVS_VM_COUNT (go test -count, default 1: raise it to hunt a flaky test)
#      IPVS_VM_BENCH_ARGS (flags for the benchmark, e.g. "-services 1000,10000")
#      IPVS_VM_KERNEL (a Debian meta package, e.g. linux-image-6.12-amd64: boot every package
#                      on that kernel)
#      IPVS_VM_QEMU_ARGS (extra qemu flags, e.g. "-cpu max")
set -euo pipefail
HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
WORK=$ROOT/_output/ipvs-vm
MOD=github.com/svcproxy/svcproxy
MODE=test RUN=
case ${1:-} in
  --bench) MODE=bench ;;
  -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
  *) RUN=${1:-^TestVM} ;;
esac

log() { echo "[ipvs-vm] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# 1. host packages, installed only when missing (package -> file it provides)
declare -A HOSTPKGS=(
  [qemu-system-x86]=/usr/bin/qemu-system-x86_64 [busybox-static]=/bin/busybox
  [kmod]=/usr/bin/kmod [cpio]=/usr/bin/cpio [xz-utils]=/usr/bin/xz [zstd]=/usr/bin/zstd
  [ipvsadm]=/usr/sbin/ipvsadm [ipset]=/usr/sbin/ipset [nftables]=/usr/sbin/nft
  [iptables]=/usr/sbin/xtables-nft-multi [iproute2]=/usr/sbin/ip
)
install_host_packages() {
  local p need=()
  for p in "${!HOSTPKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || [[ ! -e ${HOSTPKGS[$p]} ]]; then
      need+=("$p")
    fi
  done
  [[ ${#need[@]} == 0 ]] && return 0
  [[ $(id -u) == 0 ]] || die "missing packages (${need[*]}) and not root"
  log "apt-get install ${need[*]}"
  apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || die "apt-get install ${need[*]} failed"
  return 0
}

# 2. the guest kernel: the ABI package behind linux-image-amd64 (its name changes with
# point releases), unpacked into _output/ipvs-vm/kernel-KVER with modules.dep and an
# uncompressed vmlinux (PVH boot skips real mode and the xz decompressor, ~2 s under TCG)
fetch_kernel() {
  local meta=$1
  KPKG=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [[ -z $KPKG ]]; then
    apt-get update -qq >&2 || die "apt-get update failed"
    KPKG=$(apt-cache depends "$meta" | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
  [[ -n $KPKG ]] || die "cannot resolve $meta to a kernel package"
  KVER=${KPKG#linux-image-}
  KROOT=$WORK/kernel-$KVER
  if [[ -f $KROOT/vmlinux && -f $KROOT/lib/modules/$KVER/modules.dep ]]; then
    log "kernel $KVER (cached)"
    return 0
  fi
  log "fetching $KPKG $(apt-cache policy "$KPKG" | awk '/Candidate/{print $2}')"
  local dl=$WORK/deb
  rm -rf "$KROOT" "$dl" && mkdir -p "$dl" && chmod 777 "$dl"
  (cd "$dl" && apt-get download -q "$KPKG" >/dev/null 2>&1) || die "apt-get download $KPKG failed"
  dpkg -x "$dl/$KPKG"_*.deb "$KROOT.tmp"
  depmod -b "$KROOT.tmp" "$KVER" # the .deb ships no modules.dep (its postinst makes it)
  extract_vmlinux "$KROOT.tmp/boot/vmlinuz-$KVER" "$dl" "$KROOT.tmp/vmlinux"
  mv "$KROOT.tmp" "$KROOT"
  rm -rf "$dl"
}

# extract_vmlinux unpacks the ELF kernel from bzImage $1 (working in $2) into $3: the
# payload is xz (bookworm's 6.1) or zstd (its 6.12); the decompressor stops at the end of
# the payload and complains about what follows it, so the ELF header is the check.
extract_vmlinux() {
  local vmlinuz=$1 dl=$2 out=$3 off
  # a file, not a pipe, for the payload: SIGPIPE under pipefail
  off=$(LC_ALL=C grep -abo $'\xfd7zXZ\x00' "$vmlinuz" | awk -F: 'NR==1{print $1}')
  if [[ -n $off ]]; then
    tail -c +$((off + 1)) "$vmlinuz" > "$dl/payload.xz"
    xz -dc --single-stream "$dl/payload.xz" > "$out"
  else
    off=$(LC_ALL=C grep -abo $'\x28\xb5\x2f\xfd' "$vmlinuz" | awk -F: 'NR==1{print $1}')
    [[ -n $off ]] || die "no xz or zstd payload in $vmlinuz"
    tail -c +$((off + 1)) "$vmlinuz" > "$dl/payload.zst"
    zstd -qdc "$dl/payload.zst" > "$out" 2>/dev/null || true
  fi
  [[ $(head -c 4 "$out" | od -An -c | tr -d ' ') == 177ELF ]] || die "no ELF kernel unpacked from $vmlinuz"
}

# 3. the payload: a static binary and /test.sh that runs it inside the VM
build_payload() {
  PAY=$WORK/payload
  rm -rf "$PAY" && mkdir -p "$PAY"
  cd "$ROOT"
  if [[ $MODE == bench ]]; then
    CGO_ENABLED=0 go build -tags ipvsvm -o "$PAY/vm.bin" ./test/bench/ipvs
    cat > "$PAY/test.sh" <<SH
#!/bin/sh
cd /tmp && /vm.bin ${IPVS_VM_BENCH_ARGS:-} > /mnt/results/test.out 2>&1
rc=\$?
cat /mnt/results/test.out
exit \$rc
SH
  else
    build_tests
  fi
  chmod +x "$PAY/test.sh"
}

# vm_packages: the package dirs whose *_vm_test.go files the VM runs (IPVS_VM_PKGS, or all).
vm_packages() {
  if [[ -n ${IPVS_VM_PKGS:-} ]]; then
    tr ' ' '\n' <<<"$IPVS_VM_PKGS" | sed 's|^\./||; s|/$||' | grep -v '^$'
  else
    (cd "$ROOT" && git ls-files -co --exclude-standard -- '*_vm_test.go' | grep -v '^_output/' | xargs -r -n1 dirname | sort -u)
  fi
}

# The guest kernel a package's VM tests boot: the Debian meta package named by a line
# "// ipvs-vm kernel: META" in one of its *_vm_test.go files (for a test that needs a newer
# kernel than the release's stock one, e.g. linux-image-6.12-amd64 for tc links), else the
# release's stock kernel.
DEFAULT_KERNEL=linux-image-amd64
package_kernel() {
  local k
  [[ -n ${IPVS_VM_KERNEL:-} ]] && { echo "$IPVS_VM_KERNEL"; return; }
  k=$(cat "$ROOT/$1"/*_vm_test.go 2>/dev/null | sed -n 's|^// ipvs-vm kernel: \([a-z0-9.+-]*\)$|\1|p' | head -n 1)
  echo "${k:-$DEFAULT_KERNEL}"
}

# build_tests: one static test binary per package (/tests/<n>.test, its import path in
# /tests/<n>.pkg), and a /test.sh that runs each with the same -test.run, its output in
# /mnt/results/<n>.out. Stripped: the initramfs lives in the guest's memory.
build_tests() {
  local dir n run=
  mkdir -p "$PAY/tests"
  for dir in "${VM_PKGS[@]}"; do
    n=$(tr / _ <<<"$dir")
    CGO_ENABLED=0 go test -c -tags ipvsvm -ldflags='-s -w' -o "$PAY/tests/$n.test" "./$dir" \
      || die "building the VM tests of $dir failed"
    [[ -x $PAY/tests/$n.test ]] || die "$dir: no test binary built (no tests?)"
    echo "$MOD/$dir" > "$PAY/tests/$n.pkg"
  done
  compgen -G "$PAY/tests/*.test" >/dev/null || die "no VM test package found"
  [[ -n $RUN ]] && run="-test.run '$(printf %s "$RUN" | sed "s/'/'\\\\''/g")'"
  cat > "$PAY/test.sh" <<SH
#!/bin/sh
rc=0
for t in /tests/*.test; do
  n=\$(basename "\$t" .test)
  echo "=== VM package \$(cat /tests/\$n.pkg)"
  (cd /tmp && "\$t" -test.v=test2json -test.count=${IPVS_VM_COUNT:-1} -test.timeout=${IPVS_VM_TEST_TIMEOUT:-1200s} $run) > /mnt/results/\$n.out 2>&1
  r=\$?
  [ \$r = 0 ] || rc=1
  echo "=== test binary \$n exit \$r"
done
exit \$rc
SH
}

build_summary_tool() {
  mkdir -p "$ROOT/_output/tools"
  (cd "$HACK/tools/testsummary" && GOFLAGS=-mod=readonly GOTOOLCHAIN=local go build -o "$ROOT/_output/tools/testsummary" .) \
    || die "building hack/tools/testsummary failed"
}

# no_timer_check: under TCG on a loaded host the guest's IO-APIC timer check can miss its ticks
# and panic the boot ("IO-APIC + timer doesn't work!"); the check proves nothing in a VM.
boot() {
  RES=$WORK/results
  rm -rf "$RES" && mkdir -p "$RES"
  local t=${IPVS_VM_TIMEOUT:-2400}
  set +e
  timeout "$t" qemu-system-x86_64 -accel tcg ${IPVS_VM_QEMU_ARGS:-} -m "${IPVS_VM_MEM:-1024}" -smp 1 \
    -nographic -nic none -no-reboot \
    -kernel "$KROOT/vmlinux" -initrd "$WORK/initramfs.cpio.gz" \
    -append 'console=ttyS0 panic=-1 quiet no_timer_check' \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
    -virtfs local,path="$RES",mount_tag=results,security_model=none,id=results \
    </dev/null 2>&1 | sed -u 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g; s/^/vm| /' > "$CONSOLE"
  QRC=${PIPESTATUS[0]}
  set -e
}

# report_tests prints each package's verbose output, then one summary line over all of
# them; it fails when a test failed or a package's output did not come back.
report_tests() {
  local f n events=$WORK/events.json missing=0
  : > "$events"
  for f in "$PAY"/tests/*.pkg; do
    n=$(basename "$f" .pkg)
    if [[ ! -f $RES/$n.out ]]; then
      log "no test output came back for $(cat "$f")"
      missing=$((missing + 1))
      continue
    fi
    tr -d '\026' < "$RES/$n.out"
    go tool test2json -p "$(cat "$f")" < "$RES/$n.out" >> "$events"
  done
  local summary rc=0 note=
  summary=$("$ROOT/_output/tools/testsummary" < "$events") || rc=1
  if ((missing)); then rc=1; note=" ($missing package(s) sent no output)"; fi
  echo "ipvs-vm ($KVER): $(tail -n 1 <<<"$summary")$note"
  return "$rc"
}

main() {
  local t0 rc=0 k d
  t0=$(now)
  mkdir -p "$WORK"
  exec 9> "$WORK/lock"
  flock -w 1800 9 || die "another hack/ipvs-vm.sh holds $WORK/lock"
  install_host_packages
  # the initramfs has no libc for busybox: it must be the static build
  ! ldd /bin/busybox >/dev/null 2>&1 || die "/bin/busybox is dynamically linked (need busybox-static)"
  if [[ $MODE == bench ]]; then
    run_vm "$DEFAULT_KERNEL" || rc=1
    return "$rc"
  fi
  build_summary_tool
  local pkgs=()
  mapfile -t pkgs < <(vm_packages)
  # One boot per guest kernel, each with the packages that ask for it.
  for k in $(for d in "${pkgs[@]}"; do package_kernel "$d"; done | sort -u); do
    VM_PKGS=()
    for d in "${pkgs[@]}"; do
      [[ $(package_kernel "$d") == "$k" ]] && VM_PKGS+=("$d")
    done
    run_vm "$k" || rc=1
  done
  log "all VM runs: $(since "$t0")s"
  return "$rc"
}

# run_vm boots the guest kernel of Debian meta package $1 with the payload (the tests of
# VM_PKGS, or the benchmark) and reports its results.
run_vm() {
  local t0 t
  t0=$(now)
  t=$(now); fetch_kernel "$1"; local tk; tk=$(since "$t")
  CONSOLE=$WORK/console-$KVER.log
  t=$(now); build_payload; local tb; tb=$(since "$t")
  t=$(now)
  "$HACK/ipvs-vm/build-initramfs.sh" "$KROOT" "$KVER" "$WORK/initramfs.cpio.gz" "$PAY" >&2
  local ti; ti=$(since "$t")
  log "booting $KVER under TCG (timeout ${IPVS_VM_TIMEOUT:-2400}s); console: ${CONSOLE#"$ROOT"/}"
  t=$(now); boot; local tv; tv=$(since "$t")
  local up_init up_done
  up_init=$(sed -n 's/.*=== modules loaded at \([0-9.]*\)s.*/\1/p' "$CONSOLE")
  up_done=$(sed -n 's/.*=== init: done at uptime \([0-9.]*\)s.*/\1/p' "$CONSOLE")
  log "timings: kernel ${tk}s, build ${tb}s, initramfs ${ti}s, VM ${tv}s wall (guest: modules loaded at ${up_init:-?}s, done at ${up_done:-?}s), total $(since "$t0")s"
  local rc=0
  if [[ $MODE == bench ]]; then
    [[ -f $RES/test.out ]] && cat "$RES/test.out"
  else
    report_tests || rc=1
  fi
  case $QRC in
    33) log "VM verdict: pass (qemu exit 33)" ;;
    35) log "VM verdict: FAIL (qemu exit 35); console: $CONSOLE"; rc=1 ;;
    124) log "VM timed out; console tail:"; tail -n 30 "$CONSOLE" >&2; rc=1 ;;
    *) log "no verdict from the VM (qemu exit $QRC: kernel panic or /init crash); console tail:"
       tail -n 40 "$CONSOLE" >&2; rc=1 ;;
  esac
  if [[ $rc != 0 && $QRC == 35 ]]; then
    grep -E 'MODULE MISSING|insmod .* failed|not mounted|no /test.sh' "$CONSOLE" >&2 || true
  fi
  return "$rc"
}

main "$@"
