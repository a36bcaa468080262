package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TableName is the one table this backend owns, in both the ip and ip6 families.
const TableName = "kube-proxy"

const tableComment = "rules for kube-proxy"

// Chains with fixed names. The base chains are exactly upstream's (v1.35 to
// v1.37: names, types, hooks and priorities): other components order their
// own rules against them, and a rollback to upstream must leave none of
// ours hooked. Upstream's first sync deletes and re-adds its own base
// chains by name and touches no other, so a base chain of another name (or
// one it would re-add elsewhere) would keep steering packets into chains
// nobody maintains.
const (
	chainFilterPreroutingPreDNAT = "filter-prerouting-pre-dnat"
	chainFilterOutputPreDNAT     = "filter-output-pre-dnat"
	chainFilterInput             = "filter-input"
	chainFilterForward           = "filter-forward"
	chainFilterOutput            = "filter-output"
	chainNATPrerouting           = "nat-prerouting"
	chainNATOutput               = "nat-output"
	chainNATPostrouting          = "nat-postrouting"

	chainServices        = "services"
	chainMasquerading    = "masquerading"
	chainMarkMasq        = "mark-for-masquerade"
	chainReject          = "reject-chain"
	chainFirewallCheck   = "firewall-check"
	chainClusterIPsCheck = "cluster-ips-check"
)

// Sets and maps with fixed names.
const (
	mapServiceIPs       = "service-ips"
	mapServiceNodePorts = "service-nodeports"
	setNodePortIPs      = "nodeport-ips"
	setClusterIPs       = "cluster-ips"
	// setFirewallGuards holds the frontends that loadBalancerSourceRanges
	// guard. Upstream's "firewall-ips" holds the same, but as a verdict
	// map: under that name upstream's first sync after a rollback failed
	// ("Expression is not a map"), every sync until the table was deleted.
	setFirewallGuards = "firewall-guards"
	// setFirewallAllow is the prefix of the allow sets, one per protocol
	// (firewallAllowSet).
	setFirewallAllow = "firewall-allow-"
	// setHairpin is the prefix of the hairpin sets, one per shard.
	setHairpin = "hairpin-endpoints"
)

// shards splits every set that grows with the number of endpoints (the
// endpoint maps, the hairpin set) into this many. The kernel lists a set
// by walking it from its start again for every reply message of ≤ 32 KiB
// (≈ 550 elements), so reading a set of n elements back costs O(n²):
// eight sets of an eighth of the elements take a fraction of one set's
// kernel time. Changing the number renames those objects, which a restart
// then moves elements into: keep it.
const shards = 8

// serviceShard is the shard of every dispatch chain and endpoint map a
// service port uses: FNV-1a of its name, stable across restarts.
func serviceShard(n proxy.ServicePortName) int {
	h := fnvString(fnvOffset, n.Namespace)
	h = fnvString(h, "/"+n.Name+":"+n.Port+"/")
	return int(fnvString(h, string(n.Protocol)) % shards)
}

// hairpinSet is the hairpin set of an endpoint address.
func hairpinSet(a netip.Addr) string {
	h := fnvOffset
	for _, c := range a.Unmap().As16() {
		h = (h ^ uint32(c)) * fnvPrime
	}
	return hairpinSets[h%shards]
}

// hairpinSets are the hairpin sets' names, made once: an element's set
// name is then one shared string, not one allocation per endpoint.
var hairpinSets = func() (names [shards]string) {
	for k := range names {
		names[k] = shardName(setHairpin, k)
	}
	return names
}()

// shardName is name's shard k: "<name>-s<k>".
func shardName(name string, k int) string {
	return name + "-s" + strconv.Itoa(k)
}

// FNV-1a, 32 bits.
const (
	fnvOffset uint32 = 2166136261
	fnvPrime  uint32 = 16777619
)

func fnvString(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * fnvPrime
	}
	return h
}

// affinityPrefix starts the name of every per-endpoint affinity set; those
// sets are filled by the kernel, so read-back never lists their elements.
const affinityPrefix = "affinity-"

// famSpec holds how one IP family is spelled in nft.
type famSpec struct {
	family   knftables.Family
	ip       string // "ip" or "ip6" in expressions
	addrType string
	loopback string
}

func specFor(f proxy.IPFamily) famSpec {
	if f == proxy.IPv6 {
		return famSpec{knftables.IPv6Family, "ip6", "ipv6_addr", "::1"}
	}
	return famSpec{knftables.IPv4Family, "ip", "ipv4_addr", "127.0.0.0/8"}
}

func protoName(p proxy.Protocol) string { return strings.ToLower(string(p)) }

// svcHash is upstream's naming hash: the first 8 characters of
// base32(sha256(name)), stable across restarts and releases.
func svcHash(name string) string {
	sum := sha256.Sum256([]byte(name))
	return base32.StdEncoding.EncodeToString(sum[:])[:8]
}

// ruleID is the comment every rule carries: a hash of its text. The kernel
// cannot give back rule bodies through knftables, only comments, so this is
// how a restarted Proxier recognizes rules that are already right.
func ruleID(text string) string {
	sum := sha256.Sum256([]byte(text))
	return fmt.Sprintf("%x", sum[:6])
}

// servicePortID names a service port in per-service object names:
// "ns/name/proto/port" as upstream does.
func servicePortID(n proxy.ServicePortName) string {
	return fmt.Sprintf("%s/%s/%s/%s", n.Namespace, n.Name, protoName(n.Protocol), n.Port)
}

// affinityChain names a service port's per-class affinity dispatch chain.
func affinityChain(class string, n proxy.ServicePortName) string {
	id := servicePortID(n)
	return fmt.Sprintf("affinity-%s-%s-%s", class, svcHash(id), id)
}

// ownChain names a service port's own dispatch chain of a class (many
// external frontends × endpoints, see defaultOwnSlots): "<class>-HASH-ns/svc/proto/port",
// upstream's spelling of its per-service chains. A shared dispatch chain's
// name never holds a "/", so the two cannot meet.
func ownChain(class string, n proxy.ServicePortName) string {
	id := servicePortID(n)
	return fmt.Sprintf("%s-%s-%s", class, svcHash(id), id)
}

// affinitySet names the dynamic set that remembers the clients of one
// endpoint of one service port.
func affinitySet(n proxy.ServicePortName, ep netip.AddrPort) string {
	id := servicePortID(n)
	addr := strings.ReplaceAll(ep.Addr().String(), ":", ".")
	return fmt.Sprintf("%s%s-%s__%s/%d", affinityPrefix, svcHash(id), id, addr, ep.Port())
}

// elemSep joins the fields of a concatenated key or value, as nft prints it.
const elemSep = knft.ElemSep

func splitElem(s string) []string { return strings.Split(s, elemSep) }

// addrString spells an address as nft prints it.
func addrString(a netip.Addr) string { return a.Unmap().String() }

// prefixString spells a prefix as nft prints it: a full-length prefix is a
// plain address.
func prefixString(p netip.Prefix) string {
	p = p.Masked()
	if p.IsSingleIP() {
		return addrString(p.Addr())
	}
	return p.String()
}

// endpointString spells an endpoint for a "dnat to" statement.
func endpointString(ep netip.AddrPort) string {
	if ep.Addr().Unmap().Is4() {
		return fmt.Sprintf("%s:%d", addrString(ep.Addr()), ep.Port())
	}
	return fmt.Sprintf("[%s]:%d", ep.Addr(), ep.Port())
}

func familyOf(a netip.Addr) proxy.IPFamily { return proxy.FamilyOf(a) }

// firewallProtocols are the protocols of the allow sets, in the order of
// firewall-check's rules.
var firewallProtocols = []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}

// firewallAllowSet is the allow set of protocol p: its frontends'
// address · port and a source prefix. The protocol is the set's, not a
// field of its key: nft before 1.1.0 converts a one-byte host-order
// field of an interval set's key (meta l4proto) with a byteorder
// expression whose length is not its size, which kernels since the
// removal of multi-register byteorder refuse (EOPNOTSUPP).
func firewallAllowSet(p proxy.Protocol) string {
	return setFirewallAllow + strings.ToLower(string(p))
}
