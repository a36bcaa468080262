# hack/lib/netns.sh — sourced by the scripts that make throwaway namespaces (e2e, bench-e2e, demo).

# remove_namespaces PREFIX deletes every network namespace whose name starts with PREFIX, after
# killing the processes inside it (found through the namespace with `ip netns pids`, never by
# name: everything our scripts start runs in one of their namespaces). It prints each removed
# name on stdout.
remove_namespaces() {
  local prefix=$1 n pids
  for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix" || true); do
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    # shellcheck disable=SC2086 # one PID per word
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
    ip netns delete "$n" 2>/dev/null || true
    echo "$n"
  done
}
