#!/usr/bin/env bash
# hack/cluster/mkimage.sh OUT.tar ROOTFS ENTRYPOINT_JSON CMD_JSON TAG... — a single-layer image
# as a `docker save` archive (manifest.json, config, layer.tar), made from a directory without
# any container engine or registry; `ctr images import` loads it under the given TAGs (full refs,
# e.g. registry.k8s.io/pause:3.10.2). The layer tar is deterministic (sorted, owner 0, mtime 0).
set -euo pipefail
[[ $# -ge 5 ]] || { echo "usage: $0 OUT.tar ROOTFS ENTRYPOINT_JSON CMD_JSON TAG..." >&2; exit 2; }
out=$(realpath -m "$1")
rootfs=$2 ep=$3 cmd=$4
shift 4
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$w/layer.tar" .
ld=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
mkdir "$w/$ld"
mv "$w/layer.tar" "$w/$ld/layer.tar"
cat >"$w/config.json" <<J
{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
 "config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Entrypoint":$ep,"Cmd":$cmd,"WorkingDir":"/"},
 "rootfs":{"type":"layers","diff_ids":["sha256:$ld"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"hack/cluster/mkimage.sh"}]}
J
cd_=$(sha256sum "$w/config.json" | cut -d' ' -f1)
mv "$w/config.json" "$w/$cd_.json"
tags=$(printf '"%s",' "$@")
echo "[{\"Config\":\"$cd_.json\",\"RepoTags\":[${tags%,}],\"Layers\":[\"$ld/layer.tar\"]}]" >"$w/manifest.json"
tar -C "$w" -cf "$out.tmp" manifest.json "$cd_.json" "$ld"
mv "$out.tmp" "$out"
echo "[mkimage] $(basename "$out"): $* ($(du -h "$out" | cut -f1))" >&2
