#!/usr/bin/env bash
# hack/release.sh (`make release`) — everything a release publishes, under _output/release/:
#
#   bin/svcproxy-linux-{amd64,arm64}   static binaries (CGO_ENABLED=0), version-stamped
#   bin/SHA256SUMS
#   oci/                               an OCI image layout holding one image index,
#                                      svcproxy:$VERSION, with the linux/amd64 and linux/arm64
#                                      images (hack/image.sh builds and tests each: amd64 in a
#                                      chroot, arm64 in a chroot under qemu-user-static)
#   sbom/svcproxy-$VERSION-linux-$ARCH.spdx.json   SPDX 2.3 SBOM of each image: the Go modules
#                                      in its binary and the Debian packages in its base
#   digest                             the index's digest, which deploy/ is pinned to
#                                      (hack/pin-image.sh)
#
# Everything is built from the committed HEAD (git archive), whatever the work tree holds; the
# version comes from hack/version.sh (the v* tag on HEAD for a release; VERSION overrides).
# Publishing is one command with any registry client, documented in docs/user/release.md and
# printed at the end; nothing here talks to a registry.
#
# Needs root (debootstrap, chroot, binfmt_misc). Cold, it runs debootstrap for both
# architectures (the arm64 one under emulation): tens of minutes; later runs reuse
# _output/image*/ and take a few minutes. Not part of `make test`.
#
# Knobs: VERSION, ARCHES (default "amd64 arm64"), MIRROR (hack/image.sh).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
OUT=$ROOT/_output/release
ARCHES=${ARCHES:-amd64 arm64}
TOOL=$ROOT/_output/tools/image

log() { echo "[release] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root (hack/image.sh needs debootstrap and chroot)"
# One commit throughout, even if someone commits while this runs.
COMMIT=$(git -C "$ROOT" rev-parse HEAD)
export COMMIT TREE_STATE=clean
VERSION=$("$HACK/version.sh")
export VERSION
[[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || die "version $VERSION is not semver"
[[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no) ]] ||
  log "note: the work tree has uncommitted changes; the release is built from HEAD ${COMMIT:0:12}"
[[ $VERSION == *dev* || $VERSION == *+* ]] && log "note: $VERSION is not a tagged release"

# binaries builds each architecture's static binary from HEAD's archive.
binaries() {
  local src=$OUT/src arch ldflags
  rm -rf "$src" "$OUT/bin"
  mkdir -p "$src" "$OUT/bin"
  git -C "$ROOT" archive "$COMMIT" | tar -x -C "$src"
  ldflags=$("$HACK/version.sh" ldflags)
  for arch in $ARCHES; do
    log "building svcproxy $VERSION for linux/$arch ..."
    (cd "$src" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" \
      -o "$OUT/bin/svcproxy-linux-$arch" ./cmd/svcproxy)
    # Static: no program interpreter, so it runs on any distribution's userland.
    if LC_ALL=C readelf -l "$OUT/bin/svcproxy-linux-$arch" | grep -q 'program interpreter'; then
      die "svcproxy-linux-$arch is dynamically linked"
    fi
  done
  rm -rf "$src"
  (cd "$OUT/bin" && sha256sum svcproxy-linux-* >SHA256SUMS)
}

# images builds and tests each architecture's image (hack/image.sh), then joins them.
images() {
  local arch layouts=() dir
  for arch in $ARCHES; do
    ARCH=$arch BINARY=$OUT/bin/svcproxy-linux-$arch "$HACK/image.sh" build
    dir=$ROOT/_output/image
    [[ $arch == amd64 ]] || dir+=-$arch
    layouts+=("$dir/oci")
  done
  log "joining ${ARCHES// /, } into one index ..."
  "$TOOL" index --out "$OUT/oci" --ref "svcproxy:$VERSION" "${layouts[@]}" >/dev/null
  # Each architecture's image is tested as the index serves it.
  for arch in $ARCHES; do
    ARCH=$arch LAYOUT=$OUT/oci "$HACK/image.sh" test
  done
}

# sboms writes each image's SPDX SBOM.
sboms() {
  local arch dir digest created
  mkdir -p "$OUT/sbom"
  rm -f "$OUT"/sbom/*.spdx.json
  created=$(TZ=UTC git -C "$ROOT" log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ "$COMMIT")
  for arch in $ARCHES; do
    dir=$ROOT/_output/image
    [[ $arch == amd64 ]] || dir+=-$arch
    digest=$(jq -r '.manifests[0].digest' "$dir/oci/index.json")
    "$TOOL" sbom --binary "$OUT/bin/svcproxy-linux-$arch" --rootfs "$dir/rootfs" --digest "$digest" \
      --version "$VERSION" --arch "$arch" --created "$created" \
      --out "$OUT/sbom/svcproxy-$VERSION-linux-$arch.spdx.json"
  done
}

main() {
  local t0=$SECONDS digest
  command -v jq >/dev/null || apt-get install -y --no-install-recommends jq >&2
  command -v readelf >/dev/null || apt-get install -y --no-install-recommends binutils >&2
  mkdir -p "$OUT" "$(dirname "$TOOL")"
  (cd "$HACK/tools/image" && go build -o "$TOOL" .)
  binaries
  images
  sboms
  digest=$(jq -r '.manifests[0].digest' "$OUT/oci/index.json")
  echo "$digest" >"$OUT/digest"
  log "svcproxy $VERSION (commit ${COMMIT:0:12}) in $((SECONDS - t0)) s: index $digest"
  log "publish:  skopeo copy --all --preserve-digests oci:$OUT/oci:svcproxy:$VERSION docker://REGISTRY/svcproxy:$VERSION"
  log "pin:      hack/pin-image.sh REGISTRY/svcproxy   (deploy/base → REGISTRY/svcproxy@$digest)"
}

main "$@"
