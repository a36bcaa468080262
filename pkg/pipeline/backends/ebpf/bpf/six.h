// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// IPv6 for the tc programs (included by nodeport.c before the flow logic's
// IPv6 instance): the maps of the IPv6 family, laid out as IPv4's with
// 16-byte addresses, and the family's parsing, rewriting and forwarding.
//
// What the programs parse: an IPv6 header followed directly by TCP or UDP.
// A packet with any extension header (hop-by-hop options, routing,
// fragment, destination options, ...) goes to the stack untouched, as an
// IPv4 packet with options or a fragment does: the nftables rules serve
// it. So does every IPv6 fragment (a fragment header is an extension
// header), which matches IPv4, whose fragments the programs leave to the
// stack too.

#include <linux/ipv6.h>

#define AF_INET6 10

// in6 is an IPv6 address as the packets carry it, in 4-byte words so
// that the structures holding it have no padding.
struct in6 {
	__be32 w[4];
};

static __always_inline int in6_eq(const struct in6 *a, const struct in6 *b)
{
	return a->w[0] == b->w[0] && a->w[1] == b->w[1] && a->w[2] == b->w[2] && a->w[3] == b->w[3];
}

static __always_inline int in6_zero(const struct in6 *a)
{
	return !(a->w[0] | a->w[1] | a->w[2] | a->w[3]);
}

struct np_key6 {
	struct in6 addr;
	__be16 port;
	__u8 proto;
	__u8 scope; // as np_key.scope
};

struct np_be6 {
	struct in6 addr;
	__be16 port;
	__u16 pad;
};

struct np_src_key6 {
	__u32 prefixlen;
	__u32 id[2];
	struct in6 addr;
};

// np_member_key6 is packed to 4-byte alignment: 28 bytes, no padding.
struct __attribute__((packed, aligned(4))) np_member_key6 {
	__u64 id;
	struct in6 addr;
	__be16 port;
	__u16 pad;
};

struct aff_key6 {
	__u64 id;
	struct in6 client;
};

struct aff_val6 {
	struct np_be6 be;
	__u32 pad;
	__u64 seen;
};

struct np_cfg6 {
	struct in6 snat_addr;
	__u32 flags; // as np_cfg's
};

struct ct_key6 {
	struct in6 src;
	struct in6 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct ct_val6 {
	struct in6 src;
	struct in6 dst;
	__be16 sport;
	__be16 dport;
	__u8 at;
	__u8 state;
	__u8 reply;
	__u8 flags; // as ct_val.flags
	__u64 seen;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct np_key6);
	__type(value, struct np_val);
} np_services6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct np_be_key);
	__type(value, struct np_be6);
} np_backends6 SEC(".maps");

struct np_maglev_table6 {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_be6);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __u64);
	__array(values, struct np_maglev_table6);
} np_maglev6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct np_src_key6);
	__type(value, __u32);
} np_ranges6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct np_member_key6);
	__type(value, __u32);
} np_members6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct aff_key6);
	__type(value, struct aff_val6);
} np_affinity6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_cfg6);
} np_config6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct ct_key6);
	__type(value, struct ct_val6);
} np_ct6 SEC(".maps");

// IPv6's np_tunnels and np_peers.
struct np_tunnel6 {
	struct in6 node;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct in6);
	__type(value, struct np_tunnel6);
} np_tunnels6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, NP_MAX_PEERS);
	__type(key, struct in6);
	__type(value, __u32);
} np_peers6 SEC(".maps");

struct snat_val6 {
	struct ct_key6 owner;
	__u64 since;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct ct_key6);
	__type(value, struct snat_val6);
} np_snat6 SEC(".maps");

// flow_hash6 is maglev.FlowHash of an IPv6 flow: host-order words of the
// source and destination, the ports, the protocol.
static __always_inline __u32 flow_hash6(const struct ct_key6 *k)
{
	__u32 w[JHASH_MAX_WORDS] = {
		bpf_ntohl(k->src.w[0]), bpf_ntohl(k->src.w[1]), bpf_ntohl(k->src.w[2]), bpf_ntohl(k->src.w[3]),
		bpf_ntohl(k->dst.w[0]), bpf_ntohl(k->dst.w[1]), bpf_ntohl(k->dst.w[2]), bpf_ntohl(k->dst.w[3]),
		(__u32)bpf_ntohs(k->sport) << 16 | bpf_ntohs(k->dport),
		k->proto,
	};
	return jhash2(w, 10, FLOW_SEED);
}

// pkt6 is a parsed IPv6 TCP or UDP packet; ttl is its hop limit.
struct pkt6 {
	struct ct_key6 k;
	__u32 l4;
	__u8 tcp_flags;
	__u8 ttl;
};

#define IP6_OFF sizeof(struct ethhdr)

// parse_data6 parses the packet in [data, end): an IPv6 header and TCP or
// UDP right after it, anything else left to the stack.
static __always_inline int parse_data6(void *data, void *end, struct pkt6 *p)
{
	struct ethhdr *eth = data;
	struct ipv6hdr *ip = data + sizeof(*eth);

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IPV6))
		return 0;
	if (ip->nexthdr != IPPROTO_TCP && ip->nexthdr != IPPROTO_UDP)
		return 0;
	p->l4 = sizeof(*eth) + sizeof(*ip);
	__be16 *ports = (void *)(ip + 1);
	if ((void *)(ports + 2) > end)
		return 0;
	__builtin_memcpy(&p->k.src, &ip->saddr, sizeof(p->k.src));
	__builtin_memcpy(&p->k.dst, &ip->daddr, sizeof(p->k.dst));
	p->k.sport = ports[0];
	p->k.dport = ports[1];
	p->k.proto = ip->nexthdr;
	p->ttl = ip->hop_limit;
	p->tcp_flags = 0;
	if (ip->nexthdr == IPPROTO_TCP) {
		__u8 *fl = (void *)(ip + 1) + 13;
		if ((void *)(fl + 1) > end)
			return 0;
		p->tcp_flags = *fl;
	}
	return 1;
}

static __always_inline int parse6(struct __sk_buff *skb, struct pkt6 *p)
{
	return parse_data6((void *)(long)skb->data, (void *)(long)skb->data_end, p);
}

// rewrite6 gives the packet the addresses and ports of v, fixing the L4
// checksum (IPv6 has no header checksum); an address's change goes into
// the checksum as a difference, bpf_l4_csum_replace taking 2 or 4 bytes
// at most.
static __always_inline void rewrite6(struct __sk_buff *skb, const struct pkt6 *p, const struct ct_val6 *v)
{
	__u32 csum = p->l4 + (p->k.proto == IPPROTO_TCP ? offsetof(struct tcphdr, check) : offsetof(struct udphdr, check));
	__u64 l4f = p->k.proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;

	if (!in6_eq(&v->src, &p->k.src)) {
		__s64 d = bpf_csum_diff((__be32 *)&p->k.src, 16, (__be32 *)&v->src, 16, 0);
		bpf_l4_csum_replace(skb, csum, 0, d, l4f | BPF_F_PSEUDO_HDR);
		bpf_skb_store_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, saddr), &v->src, 16, 0);
	}
	if (!in6_eq(&v->dst, &p->k.dst)) {
		__s64 d = bpf_csum_diff((__be32 *)&p->k.dst, 16, (__be32 *)&v->dst, 16, 0);
		bpf_l4_csum_replace(skb, csum, 0, d, l4f | BPF_F_PSEUDO_HDR);
		bpf_skb_store_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, daddr), &v->dst, 16, 0);
	}
	if (v->sport != p->k.sport) {
		bpf_l4_csum_replace(skb, csum, p->k.sport, v->sport, l4f | 2);
		bpf_skb_store_bytes(skb, p->l4, &v->sport, 2, 0);
	}
	if (v->dport != p->k.dport) {
		bpf_l4_csum_replace(skb, csum, p->k.dport, v->dport, l4f | 2);
		bpf_skb_store_bytes(skb, p->l4 + 2, &v->dport, 2, 0);
	}
}

// sock_tuple6 is the kernel's conntrack tuple of k, and its size.
static __always_inline __u32 sock_tuple6(const struct ct_key6 *k, struct bpf_sock_tuple *t)
{
	__builtin_memcpy(t->ipv6.saddr, k->src.w, sizeof(k->src));
	__builtin_memcpy(t->ipv6.daddr, k->dst.w, sizeof(k->dst));
	t->ipv6.sport = k->sport;
	t->ipv6.dport = k->dport;
	return sizeof(t->ipv6);
}

// route6 is route for IPv6.
static __always_inline int route6(struct __sk_buff *skb, const struct ct_val6 *v, struct bpf_fib_lookup *fib)
{
	*fib = (struct bpf_fib_lookup){ .family = AF_INET6, .ifindex = skb->ingress_ifindex };
	__builtin_memcpy(fib->ipv6_src, &v->src, 16);
	__builtin_memcpy(fib->ipv6_dst, &v->dst, 16);
	int rc = bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH;
}

// send_routed6 is send_routed for IPv6.
static __always_inline int send_routed6(struct __sk_buff *skb, const struct bpf_fib_lookup *fib)
{
	struct bpf_redir_neigh nh = { .nh_family = AF_INET6 };
	__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
	return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
}

// forward6 sends a translated packet (its hop limit hops, above 1) out of
// the node interface its new destination routes through, one hop less, as
// forward does for IPv4.
static __noinline int forward6(struct __sk_buff *skb, const struct ct_val6 *v, __u8 hops)
{
	__u8 left = hops - 1;
	bpf_skb_store_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, hop_limit), &left, 1, 0);
	struct bpf_fib_lookup fib;
	if (!route6(skb, v, &fib))
		return TC_ACT_SHOT;
	return send_routed6(skb, &fib);
}

// remote6 says whether dst routes out of a node interface: an endpoint on
// another node.
static __noinline int remote6(struct __sk_buff *skb, const struct in6 *src, const struct in6 *dst)
{
	struct bpf_fib_lookup fib = { .family = AF_INET6, .ifindex = skb->ingress_ifindex };
	__builtin_memcpy(fib.ipv6_src, src, 16);
	__builtin_memcpy(fib.ipv6_dst, dst, 16);
	int rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return 0;
	__u32 ifindex = fib.ifindex;
	return bpf_map_lookup_elem(&np_devices, &ifindex) != NULL;
}

#include "reply6.h"
