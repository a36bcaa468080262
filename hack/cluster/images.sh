#!/usr/bin/env bash
# hack/cluster/images.sh [NAME...] — every image the test cluster runs, as archives in
# $IMAGES (_output/cluster/images), built without a registry or container engine and imported
# into each node's containerd by node.sh. Nothing is pulled at test time.
#
#   svcproxy    `make image`'s OCI layout (_output/image/oci), packed as an OCI archive; rebuilt
#               on every call (the layout may have changed)
#   kube-proxy  upstream kube-proxy v1.37.1 (hack/build-upstream.sh) on the same Debian root file
#               system as svcproxy's image (nftables, iptables): registry.k8s.io/kube-proxy:v1.37.1
#   pause       build/pause/linux/pause.c of k8s.io/kubernetes v1.37.1, gcc -static
#   agnhost     agnhost v1.37.1 (CGO_ENABLED=0) on a Debian stand-in for upstream's alpine base:
#               busybox-static applets, dash as /bin/sh (busybox ash runs its own `nc` applet,
#               which lacks -v), bash, netcat-openbsd, GNU wget (busybox-static's segfaults next
#               to a glibc), curl, dig (bind9-dnsutils), getent and conntrack, with their libraries
#               (also tagged glibc-dns-testing:2.1.1, the DNS specs' glibc querier: every
#               command of it is given by the spec, and it needs dig and getent; and tagged
#               build-image/distroless-iptables:v0.9.7, which only the KubeProxy CLOSE_WAIT spec
#               uses, to run `sleep`, `sh -c`, `test`, `cat`, `grep` and `conntrack -L`)
#   busybox     busybox-static, CMD sh
#   regression-issue-74839, coredns (hack/tools/coredns, v1.14.7, a minimal plugin set)
# Tags are the refs `e2e.test --list-images` prints (hack/e2e-upstream.sh checks them). The
# archives other than svcproxy's are cached: remove one to rebuild it.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MK=$HACK/cluster/mkimage.sh
WORK=$CL/rootfs
DEBS=$CL/debs
PAUSE_TAG=registry.k8s.io/pause:3.10.2
AGNHOST_TAG=registry.k8s.io/e2e-test-images/agnhost:2.66.1
BUSYBOX_TAG=registry.k8s.io/e2e-test-images/busybox:1.37.0-2
# the DNS specs' glibc querier: a glibc userland with dig and getent, which our agnhost is
GLIBC_DNS_TAG=registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1
DISTROLESS_IPTABLES_TAG=registry.k8s.io/build-image/distroless-iptables:v0.9.7
R74839_TAG=registry.k8s.io/e2e-test-images/regression-issue-74839:1.5
COREDNS_TAG=registry.k8s.io/coredns/coredns:v1.14.7
KUBE_PROXY_TAG=registry.k8s.io/kube-proxy:$KUBE_VERSION

kube_src() { echo "$(go env GOMODCACHE)/k8s.io/kubernetes@$KUBE_VERSION"; }

# copy_libs ROOT BIN...: the shared libraries BIN needs, from the host, into ROOT (those of
# the unpacked packages are all copied by the caller).
copy_libs() {
  local root=$1 b l
  shift
  for b in "$@"; do
    for l in $(LD_LIBRARY_PATH=$DEBS/x/usr/lib/x86_64-linux-gnu ldd "$b" | awk '/=>/{print $3} /ld-linux/{print $1}'); do
      [[ $l == not ]] && die "$b: a shared library is missing (ldd: not found); add its package to debs()"
      [[ -e $root$l || $l == "$DEBS"/* ]] && continue
      mkdir -p "$root$(dirname "$l")"
      cp -L "$l" "$root$l"
    done
  done
}

# debs: Debian packages for the agnhost/busybox root file systems, unpacked into $DEBS/x.
debs() {
  [[ -f $DEBS/.done ]] && return 0
  rm -rf "$DEBS"
  mkdir -p "$DEBS/x"
  (cd "$DEBS" && apt-get download busybox-static netcat-openbsd libbsd0 libmd0 wget \
    bind9-dnsutils bind9-libs libjemalloc2 libuv1 libmaxminddb0 libfstrm0 libprotobuf-c1 liblmdb0 >&2)
  local d
  for d in "$DEBS"/*.deb; do dpkg-deb -x "$d" "$DEBS/x"; done
  touch "$DEBS/.done"
}

img_pause() {
  local r=$WORK/pause
  rm -rf "$r" && mkdir -p "$r"
  gcc -static -Os -Wall -DVERSION=3.10.2 -o "$r/pause" "$(kube_src)/build/pause/linux/pause.c"
  strip "$r/pause"
  "$MK" "$IMAGES/pause.tar" "$r" '["/pause"]' 'null' $PAUSE_TAG
}

# base_userland ROOT: busybox applets, dash as sh, bash, passwd/group with e2e's users.
base_userland() {
  local r=$1 a
  mkdir -p "$r/bin" "$r/usr/bin" "$r/etc" "$r/tmp" "$r/lib64"
  chmod 1777 "$r/tmp"
  cp "$DEBS/x/bin/busybox" "$r/bin/busybox"
  for a in $("$r/bin/busybox" --list); do [[ -e $r/bin/$a ]] || ln -s busybox "$r/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user:/bin/sh\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >"$r/etc/group"
  echo 'hosts: files dns' >"$r/etc/nsswitch.conf"
}

img_agnhost() {
  local r=$WORK/agnhost ubin=$1 k
  k=$(kube_src)
  rm -rf "$r" && base_userland "$r"
  rm -f "$r/bin/sh" "$r/bin/ash" "$r/bin/nc" "$r/bin/wget"
  cp /bin/dash "$r/bin/dash" && ln -s dash "$r/bin/sh"
  cp /bin/bash "$r/bin/bash"
  cp "$DEBS/x/bin/nc.openbsd" "$r/usr/bin/nc"
  cp "$DEBS/x/usr/bin/wget" "$DEBS/x/usr/bin/dig" "$DEBS/x/usr/bin/nslookup" "$r/usr/bin/"
  mkdir -p "$r/usr/lib/x86_64-linux-gnu"
  cp -a "$DEBS/x/usr/lib/x86_64-linux-gnu/." "$r/usr/lib/x86_64-linux-gnu/"
  cp /usr/bin/curl /usr/sbin/conntrack /usr/bin/getent "$r/usr/bin/"
  copy_libs "$r" "$r/bin/dash" "$r/bin/bash" "$r/usr/bin/nc" "$r/usr/bin/wget" "$r/usr/bin/dig" \
    "$r/usr/bin/nslookup" "$r/usr/bin/curl" "$r/usr/bin/conntrack" "$r/usr/bin/getent"
  mkdir -p "$r/uploads"
  cp "$ubin/agnhost" "$r/agnhost" && ln -s agnhost "$r/agnhost-2"
  cp "$k/test/images/agnhost/porter/localhost.crt" "$k/test/images/agnhost/porter/localhost.key" "$r/"
  "$MK" "$IMAGES/agnhost.tar" "$r" '["/agnhost"]' '["pause"]' $AGNHOST_TAG $GLIBC_DNS_TAG $DISTROLESS_IPTABLES_TAG
}

img_busybox() {
  local r=$WORK/busybox
  rm -rf "$r" && base_userland "$r"
  "$MK" "$IMAGES/busybox.tar" "$r" 'null' '["sh"]' $BUSYBOX_TAG
}

img_r74839() {
  local r=$WORK/r74839 ubin=$1
  rm -rf "$r" && mkdir -p "$r"
  cp "$ubin/regression-issue-74839" "$r/"
  "$MK" "$IMAGES/regression-issue-74839.tar" "$r" '["/regression-issue-74839"]' 'null' $R74839_TAG
}

img_coredns() {
  local r=$WORK/coredns
  rm -rf "$r" && mkdir -p "$r/etc" "$r/tmp"
  (cd "$HACK/tools/coredns" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local \
    nice -n 10 go build -trimpath -ldflags "-s -w" -o "$r/coredns" .)
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"
  "$MK" "$IMAGES/coredns.tar" "$r" '["/coredns"]' 'null' $COREDNS_TAG
}

# img_kube_proxy: upstream's binary on svcproxy's Debian base (`make image` builds that base).
img_kube_proxy() {
  local r=$WORK/kube-proxy ubin=$1 base=$ROOT/_output/image/rootfs
  [[ -f $base/.packages ]] || die "no $base: run \`make image\` first"
  rm -rf "$r"
  cp -a "$base" "$r"
  rm -f "$r/.packages"
  cp "$ubin/kube-proxy" "$r/usr/local/bin/kube-proxy"
  "$MK" "$IMAGES/kube-proxy.tar" "$r" '["/usr/local/bin/kube-proxy"]' 'null' "$KUBE_PROXY_TAG"
}

# img_svcproxy: `make image`'s layout as an OCI archive. The index entry gets containerd's
# io.containerd.image.name annotation (the normalised docker.io/library/svcproxy:TAG), which
# `ctr images import` takes as the name; the layout's own ref svcproxy:TAG stays as it is.
img_svcproxy() {
  local oci=$ROOT/_output/image/oci w ref
  [[ -f $oci/index.json ]] || die "no $oci: run \`make image\` first"
  ref=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$oci/index.json")
  # A build between tags is versioned v0.1.0-N+<commit>; "+" is not allowed in an image tag
  # (kubelet: InvalidImageName), so "_" stands for it, as in Kubernetes' own image tags.
  ref=${ref//+/_}
  w=$(mktemp -d)
  cp -a "$oci/." "$w/"
  jq --arg n "docker.io/library/$ref" '.manifests[0].annotations["io.containerd.image.name"] = $n' \
    "$oci/index.json" >"$w/index.json"
  tar -C "$w" -cf "$IMAGES/svcproxy.tar.tmp" .
  rm -rf "$w"
  mv "$IMAGES/svcproxy.tar.tmp" "$IMAGES/svcproxy.tar"
  echo "$ref" >"$IMAGES/svcproxy.ref"
  log "svcproxy.tar: $ref"
}

main() {
  local names=("$@") ubin n
  # CLUSTER_IMAGES narrows the default set (e.g. a cluster without the e2e images)
  [[ ${#names[@]} -gt 0 ]] || read -ra names <<<"${CLUSTER_IMAGES:-pause agnhost busybox regression-issue-74839 coredns kube-proxy svcproxy}"
  mkdir -p "$IMAGES" "$WORK"
  for n in "${names[@]}"; do
    [[ $n != svcproxy && -f $IMAGES/$n.tar ]] && continue
    case $n in
    pause) img_pause ;;
    agnhost) debs && img_agnhost "$("$HACK/build-upstream.sh" agnhost)" ;;
    busybox) debs && img_busybox ;;
    regression-issue-74839) img_r74839 "$("$HACK/build-upstream.sh" regression-issue-74839)" ;;
    coredns) img_coredns ;;
    kube-proxy) img_kube_proxy "$("$HACK/build-upstream.sh" kube-proxy)" ;;
    svcproxy) img_svcproxy ;;
    *) die "unknown image $n" ;;
    esac
  done
}

main "$@"
