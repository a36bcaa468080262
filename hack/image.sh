#!/usr/bin/env bash
# hack/image.sh — build svcproxy's container image for one architecture as an OCI image layout,
# without a container engine, and test it. The result is what the Dockerfile builds: Debian bookworm (minbase) with
# nftables, iptables (legacy and nft), ipset, conntrack and kmod; svcproxy at
# /usr/local/bin/svcproxy and /usr/local/bin/kube-proxy a symlink to it.
#
#   hack/image.sh build   debootstrap (cached), runtime packages (cached), binary, pack
#   hack/image.sh test    unpack the layout (LAYOUT, default the one build wrote; an index's
#                         image for ARCH) and run the tools inside it with chroot
#   hack/image.sh all     both (what `make image` runs)
#
# Heavy: a cold build runs debootstrap and apt-get (about 3-5 min and ~100 MB from Debian's
# mirror; for arm64, whose package scripts run under qemu-user, several times that); later
# builds reuse the debootstrap and rootfs trees and take seconds. Needs root (debootstrap,
# chroot). Not part of `make test`. `make release` (hack/release.sh) runs it once per
# architecture and joins the two images into one index.
#
# ARCH=arm64 (or any Debian architecture but the host's) builds and tests a foreign image: its
# programs run under qemu-user-static through binfmt_misc, installed from apt when missing.
#
# Outputs, under _output/image/ (amd64) or _output/image-$ARCH/:
#   debootstrap/   pristine `debootstrap --variant=minbase bookworm` tree (cache)
#   rootfs/        debootstrap + runtime packages, apt lists and docs removed (cache; the
#                  stamp .packages records the package list it was built for)
#   app/           the svcproxy layer: usr/local/bin/{svcproxy,kube-proxy}
#   oci/           the OCI image layout, ref svcproxy:$VERSION; push it with e.g.
#                  `crane push _output/image/oci REGISTRY/svcproxy:TAG` or
#                  `skopeo copy oci:_output/image/oci:svcproxy:$VERSION docker://...`
#
# Knobs: MIRROR (default http://deb.debian.org/debian), VERSION (default: hack/version.sh),
#        ARCH (default amd64), BINARY (a prebuilt static svcproxy for ARCH instead of a build).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
ARCH=${ARCH:-amd64}
OUT=$ROOT/_output/image
[[ $ARCH == amd64 ]] || OUT+=-$ARCH
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# Keep in step with the Dockerfile's runtime stage.
PACKAGES=(nftables iptables ipset conntrack kmod)
# The image is built from one commit, fixed here: others may commit while this runs.
COMMIT=$(git -C "$ROOT" rev-parse HEAD)
# Built from HEAD's archive: clean, whatever the work tree holds.
export COMMIT TREE_STATE=clean
VERSION=${VERSION:-$("$HACK/version.sh")}
export VERSION
REF=svcproxy:$VERSION
TOOL=$ROOT/_output/tools/image

log() { echo "[image $ARCH] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need_root() { [[ $(id -u) == 0 ]] || die "run as root (debootstrap and chroot need it)"; }

# debootstrap_base makes the pristine minbase tree once.
debootstrap_base() {
  local dir=$OUT/debootstrap t0=$SECONDS
  [[ -f $dir/.debootstrap-complete ]] && return 0
  command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap >&2
  foreign_arch_support
  rm -rf "$dir" "$dir.tmp"
  log "debootstrap --variant=minbase --arch=$ARCH $SUITE (minutes) ..."
  debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$dir.tmp" "$MIRROR" >"$OUT/debootstrap.log" 2>&1 \
    || { tail -20 "$OUT/debootstrap.log" >&2; die "debootstrap failed (log: $OUT/debootstrap.log)"; }
  touch "$dir.tmp/.debootstrap-complete"
  mv "$dir.tmp" "$dir"
  log "debootstrap done in $((SECONDS - t0)) s"
}

# foreign_arch_support makes the kernel run ARCH's programs, for debootstrap's second stage,
# apt-get in the tree and the image test: qemu-user-static registers itself with binfmt_misc
# with the F flag, so that the interpreter works inside a chroot without being copied there.
foreign_arch_support() {
  [[ $ARCH == "$(dpkg --print-architecture)" ]] && return 0
  local q=qemu-${QEMU_ARCH[$ARCH]:-$ARCH}
  [[ -d /proc/sys/fs/binfmt_misc && -f /proc/sys/fs/binfmt_misc/register ]] ||
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  if [[ ! -e /proc/sys/fs/binfmt_misc/$q ]]; then
    log "installing qemu-user-static for $ARCH ..."
    apt-get install -y --no-install-recommends qemu-user-static binfmt-support >&2
    update-binfmts --enable "$q" >&2 || true
  fi
  grep -q '^flags: .*F' "/proc/sys/fs/binfmt_misc/$q" 2>/dev/null ||
    die "binfmt_misc has no $q entry with the F flag: $ARCH programs cannot run here"
}
declare -A QEMU_ARCH=([arm64]=aarch64 [amd64]=x86_64 [ppc64el]=ppc64le [armhf]=arm)

# in_chroot DIR CMD... runs CMD in DIR with /proc mounted, in a private mount namespace so
# that nothing stays mounted if this script dies.
in_chroot() {
  local dir=$1
  shift
  # shellcheck disable=SC2016 # the inner script expands its own arguments
  unshare --mount --propagation private -- bash -euo pipefail -c '
    dir=$1; shift
    mount -t proc proc "$dir/proc"
    exec chroot "$dir" "$@"' _ "$dir" "$@"
}

# runtime_rootfs copies the pristine tree and installs the runtime packages into it, trimmed
# like Debian's -slim images (no docs, man pages or locales; no apt lists).
runtime_rootfs() {
  local dir=$OUT/rootfs tmp=$OUT/rootfs.tmp want t0=$SECONDS
  want="upgrade ${PACKAGES[*]}"
  if [[ -f $dir/.packages && $(cat "$dir/.packages") == "$want" ]]; then return 0; fi
  rm -rf "$dir" "$tmp"
  cp -a "$OUT/debootstrap" "$tmp"
  rm -f "$tmp/.debootstrap-complete"
  cat >"$tmp/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
EOF
  cat >"$tmp/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d" # no daemons start in the chroot
  chmod 0755 "$tmp/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$tmp/etc/resolv.conf"
  log "installing ${PACKAGES[*]} into the root file system ..."
  in_chroot "$tmp" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get -q update >&2
  # upgrade: take the security updates a refreshed bookworm-slim would have
  in_chroot "$tmp" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get -q upgrade -y >&2
  in_chroot "$tmp" env DEBIAN_FRONTEND=noninteractive LC_ALL=C \
    apt-get -q install -y --no-install-recommends "${PACKAGES[@]}" >&2
  in_chroot "$tmp" apt-get clean
  rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*.bin "$tmp"/var/log/* \
    "$tmp/usr/sbin/policy-rc.d" "$tmp/etc/resolv.conf"
  find "$tmp/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$tmp"/usr/share/{man,info,locale}/*
  : >"$tmp/etc/resolv.conf" # the runtime bind-mounts its own
  echo "$want" >"$tmp/.packages"
  mv "$tmp" "$dir"
  log "runtime root file system ready in $((SECONDS - t0)) s ($(du -sh "$dir" | cut -f1))"
}

# app_layer puts the static binary the Dockerfile builds, and kube-proxy's symlink, in the
# svcproxy layer: BINARY, or a build of the committed HEAD (from `git archive`), not the work
# tree: an image is a release artefact, and its commit label must say what is in it.
app_layer() {
  local dir=$OUT/app commit=$COMMIT
  rm -rf "$dir" "$OUT/src"
  mkdir -p "$dir/usr/local/bin"
  if [[ -n ${BINARY:-} ]]; then
    cp "$BINARY" "$dir/usr/local/bin/svcproxy"
  else
    [[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no) ]] ||
      log "note: the work tree has uncommitted changes; the image is built from HEAD ${commit:0:12}"
    mkdir -p "$OUT/src"
    git -C "$ROOT" archive "$commit" | tar -x -C "$OUT/src"
    log "building svcproxy $VERSION (static, linux/$ARCH, HEAD ${commit:0:12}) ..."
    (cd "$OUT/src" && CGO_ENABLED=0 GOOS=linux GOARCH=$ARCH go build -trimpath \
      -ldflags "$("$HACK/version.sh" ldflags)" -o "$dir/usr/local/bin/svcproxy" ./cmd/svcproxy)
    rm -rf "$OUT/src"
  fi
  ln -s svcproxy "$dir/usr/local/bin/kube-proxy"
}

build_tool() {
  mkdir -p "$(dirname "$TOOL")"
  (cd "$HACK/tools/image" && go build -o "$TOOL" .)
}

build() {
  need_root
  mkdir -p "$OUT"
  debootstrap_base
  runtime_rootfs
  app_layer
  build_tool
  log "packing $REF into $OUT/oci ..."
  "$TOOL" pack --base "$OUT/rootfs" --app "$OUT/app" --out "$OUT/oci" --ref "$REF" --version "$VERSION" --arch "$ARCH"
  log "image: $(du -sh "$OUT/oci" | cut -f1) compressed"
}

# check NAME CMD... runs CMD inside the unpacked image and shows its first output line. In a
# foreign architecture's image, a program that stops at its netfilter netlink socket (nft,
# iptables-nft and ipset open one before they read their options) has run as far as qemu-user can take
# it, which emulates no such socket: there the check is that it started and that the image's
# dynamic loader resolves every library it needs.
check() {
  local name=$1 out
  shift
  if out=$(in_chroot "$TEST_ROOT" "$@" 2>&1); then
    log "ok: $name: $(head -1 <<<"$out")"
    return
  fi
  if [[ $ARCH != "$(dpkg --print-architecture)" && $out =~ $NETLINK_REFUSED ]]; then
    log "ok: $name: started, stopped at netfilter netlink (qemu-user); $(check_libraries "$1")"
    return
  fi
  echo "$out" >&2
  die "$name failed inside the image"
}

# NETLINK_REFUSED is what the netfilter tools print when the netlink socket fails to open.
NETLINK_REFUSED='Protocol not supported|Cannot open session to kernel'

# check_libraries PROGRAM has the image's dynamic loader list PROGRAM's libraries.
check_libraries() {
  local path loader libs
  # shellcheck disable=SC2016 # expanded by the shell in the image
  path=$(in_chroot "$TEST_ROOT" bash -c 'readlink -f "$(command -v "$1")"' _ "$1")
  loader=$(LC_ALL=C readelf -l "$TEST_ROOT$path" | sed -n 's/.*program interpreter: \(.*\)]$/\1/p')
  [[ -n $loader ]] || die "$path has no program interpreter"
  libs=$(in_chroot "$TEST_ROOT" "$loader" --list "$path" 2>&1) || { echo "$libs" >&2; die "$path: libraries"; }
  ! grep -q 'not found' <<<"$libs" || { echo "$libs" >&2; die "$path: libraries missing"; }
  echo "its $(wc -l <<<"$libs") libraries resolve"
}

# nft_version is the image's nft version: what nft says, or in a foreign architecture's image
# (see check) its package's.
nft_version() {
  if [[ $ARCH == "$(dpkg --print-architecture)" ]]; then
    in_chroot "$TEST_ROOT" nft --version
  else
    in_chroot "$TEST_ROOT" dpkg-query -W -f='${Version}' nftables
  fi | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1
}

test_image() {
  need_root
  local layout=${LAYOUT:-$OUT/oci}
  [[ -f $layout/index.json ]] || die "no layout at $layout (run hack/image.sh build)"
  build_tool
  foreign_arch_support
  TEST_ROOT=$(mktemp -d "$OUT/test-root.XXXXXX")
  trap 'rm -rf "$TEST_ROOT"' EXIT
  "$TOOL" unpack --layout "$layout" --ref "$REF" --arch "$ARCH" --out "$TEST_ROOT"
  [[ -L $TEST_ROOT/usr/local/bin/kube-proxy ]] || die "/usr/local/bin/kube-proxy is not a symlink"
  check "kube-proxy --version" /usr/local/bin/kube-proxy --version
  check "kube-proxy --version=raw" /usr/local/bin/kube-proxy --version=raw
  check "svcproxy version" /usr/local/bin/svcproxy version
  in_chroot "$TEST_ROOT" /usr/local/bin/svcproxy --version=raw | grep -qF "GitVersion:\"$VERSION\"" ||
    die "the binary does not report version $VERSION"
  in_chroot "$TEST_ROOT" /usr/local/bin/svcproxy --version=raw | grep -qF "Platform:\"linux/$ARCH\"" ||
    die "the binary is not built for linux/$ARCH"
  in_chroot "$TEST_ROOT" /usr/bin/dpkg --print-architecture | grep -qx "$ARCH" ||
    die "the image's Debian packages are not $ARCH's"
  check "iptables --version" iptables --version
  check "iptables-legacy-save --version" iptables-legacy-save --version
  check "iptables-nft-save --version" iptables-nft-save --version
  check "ip6tables-nft-restore --version" ip6tables-nft-restore --version
  check "ipset --version" ipset --version
  check "conntrack --version" conntrack --version
  check "modprobe --version" modprobe --version
  check "nft --version" nft --version
  local nftv
  nftv=$(nft_version)
  [[ $(printf '%s\n' 1.0.1 "$nftv" | sort -V | head -1) == 1.0.1 ]] || die "nft $nftv < 1.0.1 (knftables needs 1.0.1)"
  log "image test passed"
}

case ${1:-all} in
build) build ;;
test) test_image ;;
all) build && test_image ;;
*) echo "usage: $0 build|test|all" >&2; exit 2 ;;
esac
