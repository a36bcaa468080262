// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// North-south service load balancing at tc: IPv4 and IPv6 TCP and UDP
// packets that arrive on the node's interfaces for a node port (or an external or LB IP)
// are translated to the endpoint the maps name, through a conntrack/NAT
// table of the programs' own, before netfilter sees them. The programs
// decide nothing: svcproxy writes what desired decided into the maps.
//
// np_ingress (tc ingress of each node interface):
//   - a packet of a flow the table knows is translated as recorded;
//   - a new flow to an LB IP with source ranges is dropped unless its
//     source is in one of them (np_ranges);
//   - a new flow to a frontend picks an endpoint: with ClientIP affinity,
//     the client's last endpoint while it is fresh and still in the group
//     (np_affinity, np_members), else at random or by the flow's Maglev
//     slot; an endpoint reached through a node interface (on
//     another node) is forwarded from here (bpf_fib_lookup,
//     bpf_redirect_neigh), source-NATed to the node when desired
//     masquerades, so that its replies come back here; a local endpoint's
//     packet goes up the stack to the pod unmasqueraded, the client's
//     address kept (no rules masquerade it);
//   - with direct server return (NP_F_DSR), a new flow to an endpoint on
//     a peer node that decapsulates (np_tunnels) is sent to that node in
//     an IPIP tunnel (IPv6 in IPv6), the client's packet unchanged
//     (tunnel.h, tunnel6.h), and its replies go from there to the client
//     (a client inside the cluster is masqueraded instead: flow.h's
//     in_cluster);
//   - a frontend without endpoints is answered (TCP RST, ICMP port
//     unreachable) or dropped;
//   - an IPIP (IPv6 in IPv6) packet a peer tunnelled here loses its outer
//     header and goes on in np_ingress_tun (np_ingress_tun6), through
//     np_progs_tun, as a flow to this node's own endpoints of a frontend
//     of NP_SCOPE_TUNNEL.
// np_egress (tc egress of each node interface): a local endpoint's reply
// gets the frontend back as its source (the SYN-ACK of a flow a peer
// tunnelled here an MSS that fits the tunnel, tunnel.h).
// Both translate the ICMP errors about the flows they translate (icmp.h,
// icmp6.h).
// np_xdp (XDP of each node interface, with acceleration; xdp.h): the
// packets of IPv4 flows np_ingress forwards out of a node interface, sent
// on from the driver; everything else passes to np_ingress.
// Each family has maps of its own (IPv6's in six.h); the flow logic is
// written once (ct.h, masq.h, flow.h) and included for each.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "jhash.h"
#include "reply.h"

#define AF_INET 2
#define NSEC_PER_SEC 1000000000ULL

// elapsed is how long ago then was, by this CPU's clock read now. Another
// CPU can write a later time into an entry between that read and the
// lookup: a time up to a second ahead is such a refresh, and fresh (the
// plain difference would wrap to an age of centuries).
static __always_inline __u64 elapsed(__u64 now, __u64 then)
{
	__s64 d = (__s64)(now - then);
	return d < 0 && d > -(__s64)NSEC_PER_SEC ? 0 : now - then;
}

// Frontend flags.
#define NP_F_DROP 1 // no endpoint: drop, not reject
#define NP_F_MASQ 2 // desired masquerades this route
#define NP_F_MAGLEV 4 // pick by the flow's Maglev slot
#define NP_F_RANGES 8 // only sources in the group's np_ranges prefixes
#define NP_F_DSR 16 // an endpoint on a peer (np_tunnels) is reached by tunnel, the client kept
#define NP_ID_IN_CLUSTER 0 // np_ranges' prefixes of the pods and nodes of the cluster

// Frontend scopes (np_key.scope): which packets look a frontend up.
#define NP_SCOPE_DIRECT 0 // packets that arrive as they are
#define NP_SCOPE_TUNNEL 1 // packets a peer tunnelled here (DSR), once decapsulated

// np_key is a frontend: address, port (network byte order), protocol.
struct np_key {
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 scope; // NP_SCOPE_*; was padding, zero in older builds
};

// np_val is where new flows to a frontend go: count slots of group id in
// np_backends, or, with maglev set, the msize slots of its Maglev table
// (np_maglev); with count 0, a refusal as flags say. affinity is the
// ClientIP affinity timeout in seconds, 0 for none.
struct np_val {
	__u64 id;
	__u32 count;
	__u32 flags;
	__u32 msize;
	__u32 affinity;
};

struct np_be_key {
	__u64 id;
	__u32 slot;
	__u32 pad;
};

struct np_be {
	__be32 addr;
	__be16 port;
	__u16 pad;
};

// np_src_key is a source prefix of a group's LB IPs (an LPM trie key):
// prefixlen counts the group ID's 64 bits and the prefix's. The ID is two
// words so that the address follows it without padding. The ID
// NP_ID_IN_CLUSTER, which no group takes, holds instead the sources
// inside the cluster, which direct server return never tunnels.
struct np_src_key {
	__u32 prefixlen;
	__u32 id[2];
	__be32 addr;
};

// np_member_key is an endpoint of a group, for affinity's check that a
// client's endpoint is still one.
struct np_member_key {
	__u64 id;
	__be32 addr;
	__be16 port;
	__u16 pad;
};

struct aff_key {
	__u64 id;
	__be32 client;
	__u32 pad;
};

// aff_val is a client's endpoint and when it last opened a flow to it.
struct aff_val {
	struct np_be be;
	__u64 seen;
};

// np_cfg (key 0) holds the address masqueraded flows to other nodes
// leave with, and flags (NP_CFG_*). flags was once a mark and keeps its
// place in the layout of pinned maps.
struct np_cfg {
	__be32 snat_addr;
	__u32 flags;
};

// np_cfg's flags.
#define NP_CFG_DRAINING 1 // a drain has begun: the rules take new flows beside the held ones

// ct_key is one direction of a flow as its packets carry it.
struct ct_key {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

// Where a table entry applies, and what follows its rewrite.
#define CT_AT_INGRESS 0 // forward on the stack
#define CT_AT_INGRESS_FWD 1 // forward out of a node interface from here
#define CT_AT_EGRESS 2
#define CT_AT_TUNNEL 3 // encapsulate to the node in dst, the packet itself unchanged (DSR)

// Flow states, for the timeouts.
#define CT_NEW 0
#define CT_ESTABLISHED 1
#define CT_CLOSING 2 // a FIN seen
#define CT_CLOSED 3 // a RST seen

// ct_val flags.
#define CT_F_TUNNELED 1 // the flow came decapsulated from a peer (DSR)

// ct_val is the rewrite of one direction: the addresses and ports the
// packet leaves with.
struct ct_val {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 at;
	__u8 state;
	__u8 reply; // the direction answering the flow's first packet
	__u8 flags; // CT_F_*; was an unused mark, zero in older builds
	__u64 seen;
};

// The sizes are set by svcproxy at load time from the State; the
// conntrack table to its configured capacity.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct np_key);
	__type(value, struct np_val);
} np_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct np_be_key);
	__type(value, struct np_be);
} np_backends SEC(".maps");

// np_maglev maps a group ID to its Maglev table, an array of the msize
// slots' endpoints. A table is written whole into a new array that one
// update swaps in, so that a flow never sees half of an old table and half
// of a new one; BPF_F_INNER_MAP lets the arrays' sizes differ. An array
// element is 8 bytes (the kernel rounds values up to that), so endpoints
// cost no more than indexes into np_backends would, need no second lookup
// and cannot meet a slot list rewritten under an old table.
struct np_maglev_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_be);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __u64);
	__array(values, struct np_maglev_table);
} np_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct np_src_key);
	__type(value, __u32);
} np_ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct np_member_key);
	__type(value, __u32);
} np_members SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct aff_key);
	__type(value, struct aff_val);
} np_affinity SEC(".maps");

// np_devices holds the ifindexes of the node interfaces the programs are
// attached to: an endpoint routed out of one of them is on another node.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} np_devices SEC(".maps");

// np_xdp_out holds the ifindexes of the node interfaces np_xdp is attached
// to natively: the only ones it sends XDP frames out of. A driver may
// refuse frames redirected to it (a veth whose peer takes none), and the
// frame is then lost; these interfaces run XDP themselves.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} np_xdp_out SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_cfg);
} np_config SEC(".maps");

#include "dsr.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct ct_key);
	__type(value, struct ct_val);
} np_ct SEC(".maps");

// snat_val reserves a masquerade reply tuple (np_snat's key) for the flow
// whose forward key is owner, since then (the programs' clock).
struct snat_val {
	struct ct_key owner;
	__u64 since;
};

// np_snat holds the reply tuples of the flows masqueraded to other nodes,
// each reserved for its flow. Unlike np_ct it is no LRU: a reservation
// stays while its flow lives, whichever of the flow's entries np_ct
// evicts, so that no other flow can take the port meanwhile and a
// forwarded packet need not look at its reply entry. Sized as np_ct, twice
// the flows it holds; the entries are allocated when written.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct ct_key);
	__type(value, struct snat_val);
} np_snat SEC(".maps");

#include "packet.h"

// The flow logic, once per family: F(name) names the family's types, maps
// and functions (name for IPv4, name6 for IPv6); unparsed is what becomes
// of a packet parse leaves (an ICMP error about a flow, at ingress or
// egress, is translated: icmp.h). FLOW_FN is how ingress, egress and a known
// flow's rewrite are compiled: inline in np_ingress and np_egress for IPv4
// (a BPF-to-BPF call costs every packet), functions of their own in
// IPv6's programs, which the tail call reaches (np_progs6).
#define F(x) x
#define ADDR_BITS 32
#define FLOW_FN __always_inline
#define addr_eq(a, b) ((a) == (b))
#define addr_zero(a) (!(a))
#include "ct.h"
#include "masq.h"
#include "icmp.h"
#include "tunnel.h"

// unparsed is what becomes of an IPv4 packet parse leaves, in a function
// of its own so that its stack frame is not added to the flow logic's: an
// IPIP packet arriving from a peer (tunnel_in), an ICMP error about a flow
// (icmp_error).
static __noinline int unparsed(struct __sk_buff *skb, int egress)
{
	if (!egress && is_ipip(skb))
		return tunnel_in(skb);
	return icmp_error(skb, egress);
}

#include "flow.h"
#undef F
#undef ADDR_BITS
#undef FLOW_FN
#undef addr_eq
#undef addr_zero

#include "six.h"

#define F(x) x##6
#define ADDR_BITS 128
#define FLOW_FN __noinline
#define addr_eq(a, b) in6_eq(&(a), &(b))
#define addr_zero(a) in6_zero(&(a))
#include "ct.h"
#include "masq.h"
#include "icmp6.h"
#include "tunnel6.h"

// unparsed6 is unparsed for IPv6: what parse6 leaves is the stack's unless
// it is IPv6 in IPv6 from a peer (tunnel_in6) or an ICMPv6 error about a
// flow.
static __always_inline int unparsed6(struct __sk_buff *skb, int egress)
{
	if (!egress && is_ip6ip6(skb))
		return tunnel_in6(skb);
	return icmp6_error(skb, egress);
}

#include "flow.h"
#undef F
#undef ADDR_BITS
#undef FLOW_FN
#undef addr_eq
#undef addr_zero

// is_ipv6 says whether the frame carries IPv6.
static __always_inline int is_ipv6(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > (void *)(long)skb->data_end)
		return 0;
	return eth->h_proto == bpf_htons(ETH_P_IPV6);
}

// np_progs6 holds IPv6's programs, which np_ingress and np_egress hand an
// IPv6 packet to with a tail call: IPv6's frames are then not added to
// theirs, so that IPv4's code can be inline in them. svcproxy fills it at
// every load (and growth) and keeps it pinned: the kernel empties a
// program array nothing in user space holds. Without an entry the packet
// passes to the stack untranslated.
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} np_progs6 SEC(".maps");

// The slots of np_progs6.
#define NP_PROG_INGRESS6 0
#define NP_PROG_EGRESS6 1

SEC("tc")
int np_ingress6(struct __sk_buff *skb)
{
	int rc = ingress6(skb);
	if (rc == NP_UNPARSED)
		rc = unparsed6(skb, 0);
	if (rc == NP_DECAPSULATED) {
		bpf_tail_call(skb, &np_progs_tun, NP_PROG_TUN6);
		dsr_count(NP_STAT_DSR_NO_FLOW, 1);
		return TC_ACT_SHOT;
	}
	return rc;
}

// np_ingress_tun6 (np_progs_tun's NP_PROG_TUN6) is np_ingress_tun for
// IPv6.
SEC("tc")
int np_ingress_tun6(struct __sk_buff *skb)
{
	int rc = ingress_at6(skb, 1);
	if (rc == NP_UNPARSED) {
		dsr_count(NP_STAT_DSR_NO_FLOW, 1);
		return TC_ACT_SHOT;
	}
	return rc;
}

SEC("tc")
int np_egress6(struct __sk_buff *skb)
{
	int rc = egress6(skb);
	return rc == NP_UNPARSED ? unparsed6(skb, 1) : rc;
}

SEC("tc")
int np_ingress(struct __sk_buff *skb)
{
	if (is_ipv6(skb)) {
		bpf_tail_call(skb, &np_progs6, NP_PROG_INGRESS6);
		return TC_ACT_OK;
	}
	int rc = ingress(skb);
	if (rc == NP_UNPARSED)
		rc = unparsed(skb, 0);
	if (rc == NP_DECAPSULATED) {
		// The packet has lost its outer header: the stack would route
		// the inner one back out.
		bpf_tail_call(skb, &np_progs_tun, NP_PROG_TUN);
		dsr_count(NP_STAT_DSR_NO_FLOW, 0);
		return TC_ACT_SHOT;
	}
	return rc;
}

// np_ingress_tun (np_progs_tun's NP_PROG_TUN) is np_ingress for an IPv4
// packet a peer tunnelled here, once decapsulated: a program of its own,
// so that the flow logic it inlines again is verified apart from
// np_ingress's.
SEC("tc")
int np_ingress_tun(struct __sk_buff *skb)
{
	int rc = ingress_at(skb, 1);
	if (rc == NP_UNPARSED) {
		dsr_count(NP_STAT_DSR_NO_FLOW, 0);
		return TC_ACT_SHOT;
	}
	return rc;
}

SEC("tc")
int np_egress(struct __sk_buff *skb)
{
	if (is_ipv6(skb)) {
		bpf_tail_call(skb, &np_progs6, NP_PROG_EGRESS6);
		return TC_ACT_OK;
	}
	int rc = egress(skb);
	return rc == NP_UNPARSED ? unparsed(skb, 1) : rc;
}

#include "xdp.h"

// jhash_run is for tests only (svcproxy never loads it): the packet is
// the words to hash, [count, seed, word...], and the result the hash.
SEC("tc")
int jhash_run(struct __sk_buff *skb)
{
	__u32 in[2 + JHASH_MAX_WORDS] = {};
	if (bpf_skb_load_bytes(skb, 0, in, sizeof(in)))
		return 0;
	if (in[0] > JHASH_MAX_WORDS)
		return 0;
	return jhash2(&in[2], in[0], in[1]);
}

// flow_hash_run is for tests only: the flow hash of an IPv4 packet.
SEC("tc")
int flow_hash_run(struct __sk_buff *skb)
{
	struct pkt p = {};
	if (!parse(skb, &p))
		return 0;
	return flow_hash(&p.k);
}

char _license[] SEC("license") = "Dual BSD/GPL";
