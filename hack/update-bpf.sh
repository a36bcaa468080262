#!/usr/bin/env bash
# hack/update-bpf.sh — regenerate the eBPF backend's compiled programs (bpf2go writes
# pkg/pipeline/backends/ebpf/sock_bpfel.{o,go} from bpf/sock.c and pkg/pipeline/backends/ebpf/nodeport/nodeport_bpfel.{o,go}
# from bpf/nodeport.c). The outputs are committed so that building svcproxy needs no clang; run
# this after editing the C source and commit the result.
#
#   hack/update-bpf.sh                 regenerate in place (needs clang and llvm-strip)
#   hack/update-bpf.sh --install       first install Debian's toolchain (clang, llvm, libbpf-dev)
#   hack/update-bpf.sh --check DIR     regenerate into DIR instead and compare with the committed
#                                      files (hack/verify.sh); exits 1 on a difference
#
# The committed objects come from Debian 12's clang 14; another clang may compile differently,
# and the check would then report a difference that is not a bug in the source.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PKG=$ROOT/pkg/pipeline/backends/ebpf
# The generated files, relative to PKG.
GENERATED=(sock_bpfel.o sock_bpfel.go nodeport/nodeport_bpfel.o nodeport/nodeport_bpfel.go)

install_toolchain() {
  apt-get install -y clang llvm libbpf-dev
}

have_toolchain() {
  command -v clang >/dev/null && command -v llvm-strip >/dev/null && [[ -f /usr/include/bpf/bpf_helpers.h ]]
}

case ${1:-} in
  --install)
    install_toolchain
    (cd "$PKG" && go generate . ./nodeport)
    ;;
  --check)
    dir=${2:?--check needs a directory inside the module}
    rm -rf "$dir" && mkdir -p "$dir"
    cp -r "$PKG/gen.go" "$PKG/bpf" "$dir/"
    mkdir -p "$dir/nodeport" && cp "$PKG/nodeport/gen.go" "$dir/nodeport/"
    (cd "$dir" && go generate . ./nodeport)
    status=0
    for f in "${GENERATED[@]}"; do
      cmp -s "$dir/$f" "$PKG/$f" || { echo "pkg/pipeline/backends/ebpf/$f differs from what its C source in bpf/ compiles to; run hack/update-bpf.sh" >&2; status=1; }
    done
    rm -rf "$dir"
    exit $status
    ;;
  "")
    have_toolchain || { echo "clang, llvm-strip or libbpf-dev missing: hack/update-bpf.sh --install" >&2; exit 1; }
    (cd "$PKG" && go generate . ./nodeport)
    ;;
  *)
    echo "usage: $0 [--install | --check DIR]" >&2
    exit 2
    ;;
esac
