#!/usr/bin/env bash
# hack/e2e-summary.sh DIR — per-group counts of an hack/e2e-upstream.sh run, from its ginkgo
# JSON reports DIR/report-*.json (the parallel and the serial pass): passed, failed (failed, panicked, timed out, interrupted,
# aborted) and skipped (by test/cluster/e2e-skips.txt or by the spec itself at run time), over
# the specs the run selected. A spec counts in every group it belongs to (a Services spec can
# also be Conformance). Then the failed and runtime-skipped specs by name.
set -euo pipefail
dir=${1:?usage: $0 DIR}
reports=("$dir"/report-*.json)
[[ -f ${reports[0]} ]] || { echo "no report-*.json in $dir" >&2; exit 1; }

# Every spec of the suite is in each report; those a pass did not select have state "skipped"
# and no failure message. A spec counts once: by the pass that ran it, else as skipped.
jq -r -s --arg wall "$(cat "$dir/wall-seconds" 2>/dev/null || echo '?')" '
  def name: ((.ContainerHierarchyTexts // []) + [.LeafNodeText]) | join(" ");
  def outcome: if .State == "passed" then "passed"
               elif .State == "skipped" or .State == "pending" then "skipped" else "failed" end;
  def groups: name as $n |
    [ (if ($n | test("^\\[sig-network\\] .*\\[Conformance\\]")) then "sig-network [Conformance]" else empty end),
      ( ["Services", "EndpointSlice", "Conntrack", "KubeProxy", "Networking Granular Checks: Services"][] as $g
        | if ($n | startswith("[sig-network] " + $g + " ")) then $g else empty end) ];
  [ .[][].SpecReports[] | select(.LeafNodeType == "It") | {name: name, outcome: outcome, groups: groups,
      msg: (.Failure.Message // ""), ran: (.State != "skipped" or (.Failure.Message // "") != "")}
    | select(.groups | length > 0) ]
  | group_by(.name) | map((map(select(.ran)) | first) // first) as $specs
  | ( ["sig-network [Conformance]", "Services", "EndpointSlice", "Conntrack", "KubeProxy", "Networking Granular Checks: Services"][] as $g
      | [$specs[] | select(.groups | index($g))] as $s
      | "\($g)\tpassed \([$s[] | select(.outcome == "passed")] | length)\tfailed \([$s[] | select(.outcome == "failed")] | length)\tskipped \([$s[] | select(.outcome == "skipped")] | length)\ttotal \($s | length)"),
    "all selected\tpassed \([$specs[] | select(.outcome == "passed")] | length)\tfailed \([$specs[] | select(.outcome == "failed")] | length)\tskipped \([$specs[] | select(.outcome == "skipped")] | length)\ttotal \($specs | length)\twall \($wall) s",
    ($specs[] | select(.outcome == "failed") | "FAILED\t\(.name)"),
    ($specs[] | select(.outcome == "skipped" and .msg != "") | "SKIPPED AT RUN TIME\t\(.name)\t\(.msg | split("\n")[0])")
' "${reports[@]}"
