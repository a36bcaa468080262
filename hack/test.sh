#!/usr/bin/env bash
# hack/test.sh — run every test of the module: unit tests, fuzz seed corpora and the
# kernel tests (plain Go tests that need root and create their own network namespaces),
# then the monitoring checks (nested module test/monitoring) and the image tool's tests
# (nested module hack/tools/image).
#
# Prints what plain `go test` prints (package lines and the output of failed tests), keeps
# the full `go test -json` stream in _output/logs/test.json, and closes with the line
# "N passed, N failed, N skipped". Exits non-zero on any failure.
#
# Knobs: GO_TEST_FLAGS (extra flags, e.g. "-run TestFoo"), PKGS (default ./...),
#        GO_TEST_TIMEOUT (per test binary, default 20m), E2E=0 (skip hack/e2e.sh).
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
OUT=$ROOT/_output
PKGS=${PKGS:-./...}
GO_TEST_TIMEOUT=${GO_TEST_TIMEOUT:-20m}
GO_TEST_FLAGS=${GO_TEST_FLAGS:-}

log() { echo "[test] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

build_summary_tool() {
  mkdir -p "$OUT/tools"
  (cd "$HACK/tools/testsummary" && GOFLAGS=-mod=readonly GOTOOLCHAIN=local go build -o "$OUT/tools/testsummary" .) \
    || die "building hack/tools/testsummary failed"
}

main() {
  cd "$ROOT"
  [[ $(id -u) == 0 ]] || log "warning: not root; kernel tests will fail or skip"
  build_summary_tool
  log "building the e2e tools (nested module test/e2e)"
  (cd "$ROOT/test/e2e" && go build ./...) || die "test/e2e does not build"
  mkdir -p "$OUT/logs"
  local t0=$SECONDS rc=0
  # The IPVS backend's kernel tests need IPVS, which this kernel lacks: they run in a VM.
  # First, so that the closing summary line below stays the last line printed.
  "$HACK/ipvs-vm.sh" || rc=1
  log "go test $PKGS (timeout $GO_TEST_TIMEOUT per package; full log: _output/logs/test.json)"
  t0=$SECONDS
  # Then the end-to-end suite (nested module test/e2e, real kube-apiserver; hack/e2e.sh),
  # into the same stream so the closing summary counts everything. E2E=0 leaves it out.
  # shellcheck disable=SC2086
  {
    # testsummary judges go test's result from its events; the e2e suite runs regardless.
    go test -json -count=1 -timeout "$GO_TEST_TIMEOUT" $GO_TEST_FLAGS $PKGS || echo "go test exited $?"
    # The alerts and dashboards against the metrics (nested module test/monitoring: it needs
    # Prometheus' PromQL parser, whose module the daemon's go.mod should not carry).
    (cd "$ROOT/test/monitoring" && go test -json -count=1 $GO_TEST_FLAGS ./...) || echo "go test (test/monitoring) exited $?"
    # The release's image tool (nested module hack/tools/image): packing, the multi-arch
    # index and the SBOM generator on fixtures; `make release` itself takes minutes, not here.
    (cd "$HACK/tools/image" && go test -json -count=1 $GO_TEST_FLAGS ./...) || echo "go test (hack/tools/image) exited $?"
    [[ ${E2E:-1} == 0 ]] || "$HACK/e2e.sh" --json
  } 2>&1 | tee "$OUT/logs/test.json" | "$OUT/tools/testsummary" || rc=$?
  log "go test took $((SECONDS - t0)) s, exit $rc"
  return "$rc"
}

main "$@"
