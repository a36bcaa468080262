#!/usr/bin/env bash
# hack/ipvs-vm/build-initramfs.sh — pack a small initramfs (newc cpio, gzip) that boots a
# Debian kernel straight into hack/ipvs-vm/init (busybox sh as PID 1).
#
# usage: build-initramfs.sh KROOT KVER OUT.cpio.gz PAYLOAD_DIR
#   KROOT        where linux-image-KVER.deb was unpacked with dpkg -x (depmod already run)
#   PAYLOAD_DIR  copied to / as is (the static test binary and /test.sh)
#
# The output is two gzip'ed cpio archives back to back (the kernel unpacks both): the
# base (tools, modules, /init), cached beside OUT and rebuilt only when this script, the
# init, the kernel or a host tool changes, and the payload, packed on every run.
#
# Contents: static busybox (+ applet links), iproute2 ip, ipvsadm, ipset, nft and
# iptables (nft and legacy, with the xtables extensions, which are dlopen'ed and so not
# in ldd's closure), the libraries they need, and the kernel modules the tests use, in
# dependency order (/etc/insmod.list, loaded by /init with insmod). The modules are also
# indexed with depmod so that the kernel's request_module() (-> /sbin/modprobe, busybox)
# finds anything loaded on demand.
set -euo pipefail
KROOT=$(realpath "$1"); KVER=$2; OUT=$(realpath -m "$3"); PAYLOAD=$4
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Loaded at boot, in this order (plus each one's dependencies). crc32c_generic first:
# libcrc32c needs a crc32c provider and busybox ignores softdeps (crc32c-intel is
# refused under TCG: qemu64 has no SSE4.2).
MODS=(
  crc32c_generic
  # IPVS and every scheduler upstream knows
  ip_vs ip_vs_rr ip_vs_wrr ip_vs_lc ip_vs_wlc ip_vs_lblc ip_vs_lblcr ip_vs_dh ip_vs_sh
  ip_vs_sed ip_vs_nq ip_vs_mh ip_vs_fo ip_vs_ovf
  nf_conntrack nf_nat nf_conntrack_netlink nf_defrag_ipv4 nf_defrag_ipv6
  # ipset: every type the IPVS backend uses
  ip_set ip_set_hash_ip ip_set_hash_ipport ip_set_hash_ipportip ip_set_hash_ipportnet
  ip_set_hash_net ip_set_bitmap_port xt_set
  # nftables (the nftables backend in the benchmark; iptables-nft)
  nf_tables nft_compat nft_ct nft_nat nft_chain_nat nft_masq nft_reject nft_reject_inet
  nft_reject_ipv4 nft_reject_ipv6 nft_limit nft_numgen nft_hash nft_fib nft_fib_inet
  nft_fib_ipv4 nft_fib_ipv6 nft_redir nft_objref nft_log nft_quota
  # iptables (legacy and nft) with the matches and targets kube-proxy's IPVS mode writes
  ip_tables iptable_nat iptable_filter iptable_mangle ip6_tables ip6table_nat
  ip6table_filter ip6table_mangle xt_MASQUERADE xt_mark xt_comment xt_addrtype
  xt_conntrack xt_ipvs xt_multiport xt_nat xt_tcpudp xt_physdev xt_statistic xt_recent
  xt_REDIRECT xt_CT ipt_REJECT ip6t_REJECT xt_LOG xt_limit xt_state
  # iptables mode (the mode-switch tests): -m sctp in its SCTP rules
  xt_sctp
  # links and plumbing for the test topology
  dummy veth bridge xfrm_user sctp
  # 9p results share
  9p 9pnet_virtio virtio_pci
)

BASE=${OUT%.cpio.gz}.base-$KVER.cpio.gz
pack() { # DIR OUT: newc cpio, gzip (find | cpio | gzip: no early reader exit, pipefail-safe)
  (cd "$1" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -1 > "$2"
}
stamp=$( { echo "$KVER"; cat "$0" "$HERE/init"; ls -l --time-style=+%s /bin/busybox /usr/sbin/{ip,ipvsadm,ipset,nft,xtables-nft-multi,xtables-legacy-multi}; } | sha256sum | cut -c1-16)
if [[ -f $BASE && $(cat "$BASE.stamp" 2>/dev/null) == "$stamp" ]]; then
  pay=$(mktemp -d /tmp/ipvs-vm-payload.XXXXXX)
  trap 'rm -rf "$pay"' EXIT
  cp -a "$PAYLOAD"/. "$pay/"
  pack "$pay" "$OUT.payload"
  cat "$BASE" "$OUT.payload" > "$OUT" && rm -f "$OUT.payload"
  echo "initramfs: $(du -h "$OUT" | cut -f1) (cached base + payload)"
  exit 0
fi

ST=$(mktemp -d /tmp/ipvs-vm-initramfs.XXXXXX)
trap 'rm -rf "$ST"' EXIT
mkdir -p "$ST"/{bin,sbin,usr/sbin,etc,proc,sys,dev,run,tmp,mnt,srv,var,lib64,lib/x86_64-linux-gnu}
ln -s ../run "$ST/var/run"

# 1. busybox (static) + applets in /bin; the kernel's request_module() runs /sbin/modprobe
cp /bin/busybox "$ST/bin/busybox"
for a in $(/bin/busybox --list); do
  [[ $a == busybox ]] || ln -sf busybox "$ST/bin/$a"
done
ln -sf ../bin/busybox "$ST/sbin/modprobe"

# 2. dynamic tools with their ldd closure, at the same paths as on the host
copy_libs() {
  local lib
  for lib in $(ldd "$1" 2>/dev/null | grep -oE '/[^ ]+\.so[^ ]*'); do
    [[ -e $ST$lib ]] && continue
    mkdir -p "$ST$(dirname "$lib")"
    cp -L "$lib" "$ST$lib"
  done
}
for b in /usr/sbin/ip /usr/sbin/ipvsadm /usr/sbin/ipset /usr/sbin/nft \
         /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi; do
  [[ -x $b ]] || { echo "build-initramfs: $b missing on the host" >&2; exit 1; }
  cp "$b" "$ST/usr/sbin/"
  copy_libs "$b"
done
# iptables is a multi-call binary dispatched on argv[0]; the default is the nft variant
for v in ip ip6; do
  for s in "" -save -restore; do
    ln -sf xtables-nft-multi "$ST/usr/sbin/${v}tables-nft$s"
    ln -sf xtables-legacy-multi "$ST/usr/sbin/${v}tables-legacy$s"
    ln -sf xtables-nft-multi "$ST/usr/sbin/${v}tables$s"
  done
done
XT=/usr/lib/x86_64-linux-gnu/xtables
mkdir -p "$ST$XT"
cp "$XT"/*.so "$ST$XT/"
for so in "$XT"/*.so; do copy_libs "$so"; done
# iptables and ipset resolve protocol names
printf 'tcp 6 TCP\nudp 17 UDP\nsctp 132 SCTP\nicmp 1 ICMP\nipv6-icmp 58 IPv6-ICMP\n' > "$ST/etc/protocols"
: > "$ST/etc/services"
echo 'root:x:0:0:root:/:/bin/sh' > "$ST/etc/passwd"
echo 'root:x:0:' > "$ST/etc/group"

# 3. kernel modules: the closure of MODS from modules.dep, in load order
MD=lib/modules/$KVER
mkdir -p "$ST/$MD"
: > "$ST/etc/modules"
for m in "${MODS[@]}"; do
  if ! deps=$(modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" 2>/dev/null); then
    # A later kernel folds some modules into others (nft_objref into nf_tables): the
    # module it names is absent, its code is there. A module missing at run time still
    # fails the tests that need it.
    echo "build-initramfs: no module $m in $KVER (folded into another?)" >&2
    continue
  fi
  # builtin modules need no loading; every other one must show up in /proc/modules
  grep -q '^builtin' <<<"$deps" || echo "${m//-/_}" >> "$ST/etc/modules"
  awk '$1=="insmod"{print $2}' <<<"$deps"
done | awk '!seen[$0]++' > "$ST/modules.order.tmp"
# busybox's insmod takes uncompressed modules only (a later kernel ships them as .ko.xz)
while read -r ko; do
  rel=${ko#"$KROOT"/}
  mkdir -p "$ST/$(dirname "$rel")"
  case $rel in
    *.ko.xz) rel=${rel%.xz}; xz -dc "$ko" > "$ST/$rel" ;;
    *.ko.zst) rel=${rel%.zst}; zstd -qdc "$ko" > "$ST/$rel" ;;
    *) cp "$ko" "$ST/$rel" ;;
  esac
  echo "/$rel" >> "$ST/etc/insmod.list"
done < "$ST/modules.order.tmp"
rm "$ST/modules.order.tmp"
cp "$KROOT/$MD"/modules.{builtin,builtin.modinfo,order} "$ST/$MD/"
depmod -b "$ST" "$KVER"

# 4. /init, then pack the base; the payload goes into its own archive
install -m 0755 "$HERE/init" "$ST/init"
pack "$ST" "$BASE.tmp" && mv "$BASE.tmp" "$BASE" && echo "$stamp" > "$BASE.stamp"
echo "initramfs base: $(du -h "$BASE" | cut -f1) ($(du -sh "$ST" | cut -f1) unpacked, $(wc -l < "$ST/etc/insmod.list") modules)"
rm -rf "${ST:?}"/* && cp -a "$PAYLOAD"/. "$ST/"
pack "$ST" "$OUT.payload"
cat "$BASE" "$OUT.payload" > "$OUT" && rm -f "$OUT.payload"
echo "initramfs: $(du -h "$OUT" | cut -f1)"
