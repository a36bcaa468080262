#!/usr/bin/env bash
# hack/verify.sh — static checks: gofmt, go vet, staticcheck (pinned in
# hack/tools/staticcheck/go.mod) and the import rules of the design (DESIGN.md, "Data flow"):
#
#   pkg/proxy                           the shared vocabulary: imports nothing of this module (a leaf)
#   pkg/pipeline/<stage>                a stage imports only the stages before it in
#                                       watch -> model -> desired and the vocabulary:
#     watch                             pkg/proxy, model
#     model                             only pkg/proxy, k8s.io/api, k8s.io/apimachinery, klog,
#                                       k8s.io/utils/net (upstream's sloppy IP parser), stdlib;
#                                       no k8s.io/client-go anywhere below it
#     desired                           pkg/proxy, model, maglev; no k8s.io/client-go
#     maglev, reconcile                 only pkg/proxy and the standard library: a pure table, and
#                                       the backends' shared engine that knows no backend and no
#                                       kernel client
#   pkg/pipeline/backends/<backend>     must not depend on k8s.io/client-go, model or watch
#                                       (model only through desired, whose Compute takes a Snapshot);
#                                       a backend is every package directly under pkg/pipeline/backends/,
#                                       wired into internal/backends or not yet
#   a backend package                   imported by internal/backends (its row) alone, and by
#                                       packages below it: a backend is every package of the
#                                       set above that internal/backends imports, so adding one
#                                       touches its package and its row; test/ (benchmark
#                                       harnesses timing one backend below the app) is exempt
#   pkg/testing/...                     test support: cmd/svcproxy does not depend on it
#   everything                          must not depend on k8s.io/kubernetes
#   pkg/...                             imports nothing under internal/, tests and files behind
#                                       build tags included
#
# Dependencies are those of the non-test packages (`go list -deps`), except for the pkg/ rule,
# which also reads every import line of every .go file under pkg/. Runs every check, then
# exits non-zero if any failed, naming each offending file or import edge. Where clang is
# installed, it also regenerates the eBPF objects and compares them with the committed ones.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
OUT=$ROOT/_output
MOD=github.com/svcproxy/svcproxy
FAILED=()

log() { echo "[verify] $*" >&2; }
rel() { if [[ $1 == "$ROOT" ]]; then echo .; else echo "${1#"$ROOT"/}"; fi; }
fail() { log "FAIL: $*"; FAILED+=("$1"); }

# Modules verified: the main one plus the nested Go modules that hold our own code.
modules() {
  echo "$ROOT"
  [[ -f $ROOT/test/e2e/go.mod ]] && echo "$ROOT/test/e2e"
  [[ -f $ROOT/test/monitoring/go.mod ]] && echo "$ROOT/test/monitoring"
  echo "$HACK/tools/testsummary"
  [[ -f $HACK/tools/image/go.mod ]] && echo "$HACK/tools/image"
}

check_gofmt() {
  log "gofmt -l"
  local files bad
  files=$(cd "$ROOT" && git ls-files -co --exclude-standard -- '*.go' | grep -v '^_output/' || true)
  [[ -n $files ]] || return 0
  # shellcheck disable=SC2086
  # gofmt exits 2 on a syntax error; report its output either way.
  bad=$(cd "$ROOT" && gofmt -l $files 2>&1) || true
  if [[ -n $bad ]]; then
    echo "$bad" | sed 's/^/  gofmt -l: /' >&2
    fail "gofmt"
  fi
}

check_vet() {
  local m
  for m in $(modules); do
    log "go vet ./... in $(rel "$m")"
    (cd "$m" && go vet ./...) || fail "go vet ($(rel "$m"))"
  done
}

build_staticcheck() {
  mkdir -p "$OUT/tools"
  (cd "$HACK/tools/staticcheck" && GOFLAGS=-mod=readonly GOTOOLCHAIN=local \
    go build -o "$OUT/tools/staticcheck" honnef.co/go/tools/cmd/staticcheck)
}

# check_tidy: go.mod and go.sum say exactly what the code needs (direct
# requirements not marked indirect, nothing missing or stale).
check_tidy() {
  local m
  for m in $(modules); do
    log "go mod tidy -diff in $(rel "$m")"
    (cd "$m" && go mod tidy -diff >/dev/null) || fail "go mod tidy ($(rel "$m")): run go mod tidy"
  done
}

check_staticcheck() {
  log "staticcheck ($(awk '$1=="honnef.co/go/tools"{print $2}' "$HACK/tools/staticcheck/go.mod"))"
  build_staticcheck || { fail "staticcheck (build)"; return 0; }
  local m
  for m in $(modules); do
    (cd "$m" && "$OUT/tools/staticcheck" ./...) || fail "staticcheck ($(rel "$m"))"
  done
}

# pkg_exists PKG: true when the package directory has non-test Go files.
pkg_exists() {
  local dir=$ROOT/${1#"$MOD"/}
  compgen -G "$dir/*.go" >/dev/null && ls "$dir"/*.go | grep -qv '_test\.go$'
}

# deps_graph PKG: lines "importer imported" for every edge in PKG's non-test dependency graph.
deps_graph() {
  (cd "$ROOT" && go list -e -deps -f '{{$p := .ImportPath}}{{range .Imports}}{{$p}} {{.}}{{"\n"}}{{end}}' "$1")
}

# path_to GRAPH FROM TO: the shortest import chain FROM -> ... -> TO in GRAPH ("a b" edge lines).
path_to() {
  awk -v from="$2" -v to="$3" '
    { adj[$1] = adj[$1] " " $2 }
    END {
      q[0] = from; seen[from] = 1; head = 0; tail = 1
      while (head < tail) {
        cur = q[head++]
        if (cur == to) break
        n = split(adj[cur], next_, " ")
        for (i = 1; i <= n; i++) if (!seen[next_[i]]++) { prev[next_[i]] = cur; q[tail++] = next_[i] }
      }
      if (!(to in seen)) exit
      p = to
      while (p != from) { out = " -> " p out; p = prev[p] }
      print from out
    }' <<<"$1"
}

# forbid_deps PKG REGEX WHY [EXEMPT]: no package in PKG's dependency closure may match REGEX,
# except through an importer matching EXEMPT. Reports each edge into the forbidden set.
forbid_deps() {
  local pkg=$1 re=$2 why=$3 exempt=${4:-^$} graph edges a b
  graph=$(deps_graph "$pkg")
  edges=$(awk -v re="$re" -v ex="$exempt" '$2 ~ re && $1 !~ re && $1 !~ ex { print $1, $2 }' <<<"$graph" | sort -u)
  if [[ -n $edges ]]; then
    while read -r a b; do
      echo "  forbidden edge ($why): $a -> $b" >&2
      [[ $pkg == ./* || $a == "$pkg" ]] || echo "    reached by: $(path_to "$graph" "$pkg" "$a")" >&2
    done <<<"$edges"
    fail "imports: ${pkg#"$MOD"/} depends on $why"
  fi
}

# allow_direct PKG REGEX WHY: every direct non-stdlib import of PKG must match REGEX.
allow_direct() {
  local pkg=$1 re=$2 why=$3 bad
  bad=$(cd "$ROOT" && go list -e -f '{{range .Imports}}{{.}}{{"\n"}}{{end}}' "$pkg" \
    | grep -E '^[^/]+\.[^/]+/' | grep -Ev "$re" || true)
  if [[ -n $bad ]]; then
    echo "$bad" | while read -r e; do echo "  forbidden edge (allowed: $why): ${pkg#"$MOD"/} -> $e" >&2; done
    fail "imports: ${pkg#"$MOD"/} imports outside $why"
  fi
}

# check_pkg_no_internal: no file under pkg/ (tests and build-tagged files included) imports a
# package under internal/, and no package under pkg/ reaches one through its dependencies.
check_pkg_no_internal() {
  log "import rules: pkg/ imports nothing under internal/ (tests included)"
  local hits bad="" file imp
  hits=$(cd "$ROOT" && git ls-files -co --exclude-standard -- 'pkg/*.go' \
    | xargs -r grep -HoE "^[[:space:]]*(import[[:space:]]+)?([[:alnum:]_.]+[[:space:]]+)?\"${MOD//./\\.}/internal/[^\"]*\"" || true)
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    file=${line%%:*}
    imp=$(grep -oE "\"[^\"]+\"" <<<"${line#*:}" | tr -d '"')
    bad+="  forbidden import (pkg/ must not import internal/): $file -> $imp"$'\n'
  done <<<"$hits"
  if [[ -n $bad ]]; then
    printf '%s' "$bad" >&2
    fail "imports: pkg/ imports internal/"
  fi
  forbid_deps "./pkg/..." "^${MOD//./\\.}/internal/" "internal/ (below pkg/)"
}

# backend_dirs: the backends' directory names under pkg/pipeline/backends/ (see the header).
backend_dirs() {
  local d
  for d in "$ROOT"/pkg/pipeline/backends/*/; do basename "$d"; done
}

# check_backend_imports: a backend package (one internal/backends wires) is named by its row
# alone: no other non-test package imports it or a package below it (see the header).
check_backend_imports() {
  log "import rules: only internal/backends imports a backend package"
  local table=$MOD/internal/backends wired backends="" b edges
  wired=$(cd "$ROOT" && go list -e -f '{{join .Imports "\n"}}' "$table")
  for b in $(backend_dirs); do
    grep -qx "$MOD/pkg/pipeline/backends/$b" <<<"$wired" && backends+="$MOD/pkg/pipeline/backends/$b"$'\n'
  done
  if [[ -z $backends ]]; then
    fail "imports: internal/backends wires no backend package, so the rule checks nothing"
    return 0
  fi
  edges=$(cd "$ROOT" && go list -e -f '{{$p := .ImportPath}}{{range .Imports}}{{$p}} {{.}}{{"\n"}}{{end}}' ./... \
    | awk -v list="$backends" -v table="$table" -v test="$MOD/test/" '
      BEGIN { n = split(list, b, "\n"); for (i = 1; i <= n; i++) if (b[i] != "") be[b[i]] = 1 }
      {
        owner = ""
        for (k in be) if ($2 == k || index($2, k "/") == 1) owner = k
        if (owner == "" || $1 == table || $1 == owner || index($1, owner "/") == 1 || index($1, test) == 1) next
        print $1, $2
      }' | sort -u)
  if [[ -n $edges ]]; then
    while read -r a b; do echo "  forbidden edge (a backend is named by its row alone): ${a#"$MOD"/} -> ${b#"$MOD"/}" >&2; done <<<"$edges"
    fail "imports: a package outside internal/backends names a backend"
  fi
}

# allow_module PKG REGEX WHY: every direct import of PKG from this module must match REGEX.
allow_module() {
  local pkg=$1 re=$2 why=$3 bad
  bad=$(cd "$ROOT" && go list -e -f '{{range .Imports}}{{.}}{{"\n"}}{{end}}' "$pkg" \
    | grep -E "^${MOD//./\\.}/" | grep -Ev "$re" || true)
  if [[ -n $bad ]]; then
    echo "$bad" | while read -r e; do echo "  forbidden edge (allowed: $why): ${pkg#"$MOD"/} -> ${e#"$MOD"/}" >&2; done
    fail "imports: ${pkg#"$MOD"/} imports outside $why"
  fi
}

# check_stages: the vocabulary is a leaf, each stage of the pipeline imports only the stages
# before it, and the binary links no test support (see the header).
check_stages() {
  local clientgo='^k8s\.io/client-go(/|$)' m="${MOD//./\\.}" p
  allow_module "$MOD/pkg/proxy" '^$' "nothing of this module"
  allow_module "$MOD/pkg/pipeline/watch" "^$m/pkg/(proxy|pipeline/model)\$" "pkg/proxy, model"
  p=$MOD/pkg/pipeline/desired
  forbid_deps "$p" "$clientgo" "k8s.io/client-go"
  allow_module "$p" "^$m/pkg/(proxy|pipeline/(model|maglev))\$" "pkg/proxy, model, maglev"
  for p in maglev reconcile; do
    allow_direct "$MOD/pkg/pipeline/$p" "^$m/pkg/proxy\$" "pkg/proxy and the standard library"
  done
  p=$MOD/pkg/pipeline/model
  forbid_deps "$p" "$clientgo" "k8s.io/client-go"
  allow_direct "$p" "^($m/pkg/proxy|k8s\.io/api/|k8s\.io/apimachinery/|k8s\.io/klog/|k8s\.io/utils/net$)" \
    "pkg/proxy, k8s.io/api, k8s.io/apimachinery, klog, k8s.io/utils/net"
  forbid_deps "./cmd/svcproxy" "^$m/pkg/testing(/|\$)" "test support (pkg/testing)"
}

check_imports() {
  log "import rules (go list -deps, non-test packages)"
  local clientgo='^k8s\.io/client-go(/|$)'
  local b p
  for b in $(backend_dirs); do
    p=$MOD/pkg/pipeline/backends/$b
    if ! pkg_exists "$p"; then log "  (skip ${p#"$MOD"/}: no package yet)"; continue; fi
    forbid_deps "$p" "$clientgo" "k8s.io/client-go"
    # desired.Compute takes a model.Snapshot, so desired -> model is the one allowed path.
    forbid_deps "$p" "^${MOD//./\\.}/pkg/pipeline/model(/|\$)" "pkg/pipeline/model" "^${MOD//./\\.}/pkg/pipeline/desired\$"
    forbid_deps "$p" "^${MOD//./\\.}/pkg/pipeline/watch(/|\$)" "pkg/pipeline/watch"
  done
  check_stages
  forbid_deps "./..." '^k8s\.io/kubernetes(/|$)' "k8s.io/kubernetes"
  check_pkg_no_internal
  check_backend_imports
}

# check_bpf: the committed eBPF objects are what their C source compiles to. Needs clang;
# without it the comparison is skipped with a notice (building never needs clang).
check_bpf() {
  if ! command -v clang >/dev/null || ! command -v llvm-strip >/dev/null || [[ ! -f /usr/include/bpf/bpf_helpers.h ]]; then
    log "NOTICE: clang, llvm-strip or libbpf-dev not installed: the committed eBPF objects were NOT compared with their source (hack/update-bpf.sh --install)"
    return 0
  fi
  log "eBPF objects: regenerate pkg/pipeline/backends/ebpf and compare"
  "$HACK/update-bpf.sh" --check "$OUT/bpfcheck/ebpf" || fail "eBPF objects out of date"
}

main() {
  cd "$ROOT"
  export GOTOOLCHAIN=local
  check_gofmt
  check_vet
  check_tidy
  check_staticcheck
  check_imports
  check_bpf
  if ((${#FAILED[@]})); then
    log "verify FAILED: ${#FAILED[@]} check(s):"
    printf '  - %s\n' "${FAILED[@]}" >&2
    exit 1
  fi
  log "verify passed"
}

main "$@"
