#!/usr/bin/env bash
# hack/version.sh — the version svcproxy's builds stamp into the binary, from git.
#
#   hack/version.sh            the version: VERSION if set, else from `git describe`
#   hack/version.sh ldflags    the -ldflags of a release build of that version
#
# The version is semver with a leading v, in the Kubernetes style: on a tag, the tag (v0.1.0);
# N commits after it, v0.1.0-N+<commit>; with uncommitted changes, "-dirty" at the end. A
# checkout without a reachable v* tag gives v0.0.0-dev+<commit>, so that an untagged build
# never passes for a release.
#
# ldflags stamps svcproxy's own version (svcproxy --version, svcproxy version) and the same
# values into k8s.io/component-base/version, the source of the kubernetes_build_info metric,
# the way upstream stamps kube-proxy's. The build date is the commit's, so that two builds of
# one commit are the same bytes.
#
# Env: VERSION (override), COMMIT (default HEAD's), TREE_STATE (clean|dirty, default from git).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

git_() { git -C "$ROOT" "$@"; }

tree_state() {
  if [[ -n ${TREE_STATE:-} ]]; then echo "$TREE_STATE"; return; fi
  if git_ diff --quiet HEAD -- 2>/dev/null; then echo clean; else echo dirty; fi
}

# version prints VERSION, or git describe's answer as semver.
version() {
  if [[ -n ${VERSION:-} ]]; then echo "$VERSION"; return; fi
  local commit desc dirty=""
  commit=${COMMIT:-$(git_ rev-parse HEAD)}
  [[ $(tree_state) == dirty ]] && dirty=-dirty
  if desc=$(git_ describe --tags --match 'v[0-9]*' --abbrev=12 "$commit" 2>/dev/null); then
    # v0.1.0-3-g0123456789ab → v0.1.0-3+0123456789ab
    if [[ $desc =~ ^(.*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
      desc="${BASH_REMATCH[1]}-${BASH_REMATCH[2]}+${BASH_REMATCH[3]}"
      echo "$desc$dirty"
    elif [[ -n $dirty ]]; then
      echo "$desc+${commit:0:12}$dirty"
    else
      echo "$desc"
    fi
    return
  fi
  echo "v0.0.0-dev+${commit:0:12}$dirty"
}

ldflags() {
  local v commit tree date major minor p ld="-s -w"
  v=$(version)
  commit=${COMMIT:-$(git_ rev-parse HEAD)}
  tree=$(tree_state)
  date=$(TZ=UTC git_ log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ "$commit")
  [[ $v =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "version $v is not semver" >&2; exit 1; }
  major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
  p=github.com/svcproxy/svcproxy/internal/app
  ld+=" -X $p.Version=$v -X $p.gitCommit=$commit -X $p.gitTreeState=$tree -X $p.buildDate=$date"
  p=k8s.io/component-base/version
  ld+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ld+=" -X $p.gitCommit=$commit -X $p.gitTreeState=$tree -X $p.buildDate=$date"
  echo "$ld"
}

case ${1:-version} in
version) version ;;
ldflags) ldflags ;;
*) echo "usage: $0 [version|ldflags]" >&2; exit 2 ;;
esac
