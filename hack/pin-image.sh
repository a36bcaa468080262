#!/usr/bin/env bash
# hack/pin-image.sh REPOSITORY [DIGEST] [DIR] — pin svcproxy's image in deploy/ to a published
# release: every kustomization under DIR (default deploy/) that sets the image `svcproxy`
# (deploy/base and each overlay) gets `newName: REPOSITORY` and `digest: DIGEST` in place of
# its name and tag, so that `kubectl apply -k` installs REPOSITORY@DIGEST, the image index
# `make release` built, whatever a tag later points to.
#
#   hack/pin-image.sh registry.example.com/svcproxy
#   hack/pin-image.sh registry.example.com/svcproxy sha256:0123... /tmp/my-deploy
#
# DIGEST defaults to the index digest of the last `make release` (_output/release/digest).
# Only the `images:` entries named svcproxy change; run it on a copy to keep the checkout's.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "[pin-image] ERROR: $*" >&2; exit 1; }

[[ $# -ge 1 && $# -le 3 ]] || { sed -n '2,13p' "$0" >&2; exit 2; }
REPO=$1
DIGEST=${2:-$(cat "$ROOT/_output/release/digest" 2>/dev/null || true)}
DIR=${3:-$ROOT/deploy}
[[ $DIGEST =~ ^sha256:[0-9a-f]{64}$ ]] || die "digest '$DIGEST' is not sha256:<64 hex> (run make release, or pass one)"
# A registry may have a port (host:5000/svcproxy); the last path element has no tag.
[[ $REPO =~ ^[a-z0-9][a-z0-9._:/-]*$ && $REPO != *@* && ${REPO##*/} != *:* ]] ||
  die "'$REPO' is not a repository (no tag, no digest)"

n=0
while IFS= read -r -d '' f; do
  grep -qE '^ *- name: svcproxy *$' "$f" || continue
  # In the entry named svcproxy, the first of newName/newTag/digest becomes the pair, the
  # others go; every other line is kept as it is.
  awk -v repo="$REPO" -v digest="$DIGEST" '
    /^ *- name: svcproxy *$/ { print; entry = 1; done = 0; next }
    entry && /^ +(newName|newTag|digest):/ {
      if (!done) { ind = $0; sub(/[^ ].*/, "", ind); print ind "newName: " repo; print ind "digest: " digest; done = 1 }
      next
    }
    { entry = 0; print }' "$f" >"$f.tmp"
  mv "$f.tmp" "$f"
  echo "pinned ${f#"$DIR"/}: $REPO@$DIGEST"
  n=$((n + 1))
done < <(find "$DIR" -name kustomization.yaml -print0 | sort -z)
[[ $n -gt 0 ]] || die "no kustomization under $DIR sets the image svcproxy"
