#!/usr/bin/env bash
# hack/build-svcproxy-at.sh COMMIT|--previous [MODE] — build svcproxy as it was at COMMIT of
# this repository, for the tests that upgrade a node from an earlier svcproxy and downgrade it
# back (test/e2e, UpgradeAndDowngradeUnderLoad). --previous is the commit pinned in
# hack/tools/svcproxy-previous-MODE when MODE is given and that file exists, else in
# hack/tools/svcproxy-previous (the file's last line that is not a comment).
#
# The tree of COMMIT comes from `git archive` (no worktree, no checkout: the caller's index and
# branches are left alone) into a temporary dir, and is built with its own go.mod, whatever this
# tree's says now; modules come from the Go module cache or proxy as for any build.
#
# The binary goes to _output/svcproxy-at/<full commit>/svcproxy (override the parent with
# SVCPROXY_AT_DIR); one already there is reused in 0 s. Prints the binary's path (only that) on
# stdout; progress goes to stderr. Cold: about a minute on 2 cores.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)

log() { echo "[build-svcproxy-at] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

main() {
  [[ $# == 1 || ($# == 2 && $1 == --previous) ]] || die "usage: $0 COMMIT|--previous [MODE]"
  local rev=$1 commit out t0=$SECONDS pin=$HACK/tools/svcproxy-previous
  [[ $# == 1 || ! -f $pin-$2 ]] || pin=$pin-$2
  [[ $rev != --previous ]] || rev=$(grep -v '^#' "$pin" | tail -n 1)
  commit=$(git -C "$ROOT" rev-parse --verify --quiet "$rev^{commit}") || die "no commit $rev in $ROOT"
  out=${SVCPROXY_AT_DIR:-$ROOT/_output/svcproxy-at}/$commit
  if [[ -x $out/svcproxy ]]; then
    echo "$out/svcproxy"
    return
  fi
  mkdir -p "$out"
  SRC=$(mktemp -d)
  trap 'rm -rf "${SRC:-}"' EXIT
  git -C "$ROOT" archive "$commit" | tar -x -C "$SRC"
  log "building svcproxy at ${commit:0:12} ..."
  # The version is the commit's: the binary's --version tells the two builds apart in logs.
  (cd "$SRC" && go build -trimpath -o "$out/svcproxy.tmp" \
    -ldflags "-X github.com/svcproxy/svcproxy/internal/app.gitCommit=$commit -X github.com/svcproxy/svcproxy/internal/app.gitTreeState=clean" ./cmd/svcproxy) >&2 ||
    die "go build at ${commit:0:12} failed"
  # Renamed at the end: an interrupted build is never taken for a finished one.
  mv "$out/svcproxy.tmp" "$out/svcproxy"
  log "built in $((SECONDS - t0)) s: $out/svcproxy"
  echo "$out/svcproxy"
}

main "$@"
