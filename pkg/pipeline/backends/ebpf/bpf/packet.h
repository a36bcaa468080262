// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// IPv4 packets, included by nodeport.c after its maps: the flow hash,
// parsing, rewriting and forwarding, the routing questions the flow logic
// asks, and the kernel's conntrack lookup (which IPv6's logic uses too).

#ifndef SVCPROXY_PACKET_H
#define SVCPROXY_PACKET_H

// flow_hash is maglev.FlowHash of an IPv4 flow: host-order words of the
// source and destination, the ports, the protocol.
static __always_inline __u32 flow_hash(const struct ct_key *k)
{
	__u32 w[JHASH_MAX_WORDS] = {
		bpf_ntohl(k->src),
		bpf_ntohl(k->dst),
		(__u32)bpf_ntohs(k->sport) << 16 | bpf_ntohs(k->dport),
		k->proto,
	};
	return jhash2(w, 4, FLOW_SEED);
}

// pkt is a parsed IPv4 TCP or UDP packet.
struct pkt {
	struct ct_key k;
	__u32 l4; // offset of the L4 header
	__u8 tcp_flags;
	__u8 ttl;
};

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

// parse_data parses the packet in [data, end) (tc's and XDP's alike).
static __always_inline int parse_data(void *data, void *end, struct pkt *p)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	if (ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
		return 0; // options or a fragment: left to the stack
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return 0;
	p->l4 = sizeof(*eth) + sizeof(*ip);
	__be16 *ports = (void *)(ip + 1);
	if ((void *)(ports + 2) > end)
		return 0;
	p->k.src = ip->saddr;
	p->k.dst = ip->daddr;
	p->k.sport = ports[0];
	p->k.dport = ports[1];
	p->k.proto = ip->protocol;
	p->ttl = ip->ttl;
	p->tcp_flags = 0;
	if (ip->protocol == IPPROTO_TCP) {
		__u8 *fl = (void *)ip + sizeof(*ip) + 13;
		if ((void *)(fl + 1) > end)
			return 0;
		p->tcp_flags = *fl;
	}
	return 1;
}

static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	return parse_data((void *)(long)skb->data, (void *)(long)skb->data_end, p);
}

// rewrite gives the packet the addresses and ports of v, fixing the
// checksums.
static __always_inline int rewrite(struct __sk_buff *skb, const struct pkt *p, const struct ct_val *v)
{
	__u32 ip_off = sizeof(struct ethhdr);
	__u32 csum = p->l4 + (p->k.proto == IPPROTO_TCP ? offsetof(struct tcphdr, check) : offsetof(struct udphdr, check));
	__u64 l4f = p->k.proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;

	if (v->src != p->k.src) {
		bpf_l4_csum_replace(skb, csum, p->k.src, v->src, l4f | BPF_F_PSEUDO_HDR | 4);
		bpf_l3_csum_replace(skb, ip_off + offsetof(struct iphdr, check), p->k.src, v->src, 4);
		bpf_skb_store_bytes(skb, ip_off + offsetof(struct iphdr, saddr), &v->src, 4, 0);
	}
	if (v->dst != p->k.dst) {
		bpf_l4_csum_replace(skb, csum, p->k.dst, v->dst, l4f | BPF_F_PSEUDO_HDR | 4);
		bpf_l3_csum_replace(skb, ip_off + offsetof(struct iphdr, check), p->k.dst, v->dst, 4);
		bpf_skb_store_bytes(skb, ip_off + offsetof(struct iphdr, daddr), &v->dst, 4, 0);
	}
	if (v->sport != p->k.sport) {
		bpf_l4_csum_replace(skb, csum, p->k.sport, v->sport, l4f | 2);
		bpf_skb_store_bytes(skb, p->l4, &v->sport, 2, 0);
	}
	if (v->dport != p->k.dport) {
		bpf_l4_csum_replace(skb, csum, p->k.dport, v->dport, l4f | 2);
		bpf_skb_store_bytes(skb, p->l4 + 2, &v->dport, 2, 0);
	}
	return 0;
}

// dec_ttl takes one off the packet's TTL (ttl before), as the kernel's
// forwarding does, and fixes the header checksum in the same
// one's-complement steps as np_xdp, so that both leave equal headers.
static __always_inline void dec_ttl(struct __sk_buff *skb, __u8 ttl)
{
	__u8 left = ttl - 1;
	bpf_l3_csum_replace(skb, sizeof(struct ethhdr) + offsetof(struct iphdr, check), bpf_htons((__u16)ttl << 8),
			    bpf_htons((__u16)left << 8), 2);
	bpf_skb_store_bytes(skb, sizeof(struct ethhdr) + offsetof(struct iphdr, ttl), &left, 1, 0);
}

// route sets fib to where a packet from v's source to its destination
// leaves this node, as its forwarding would route it; 0 when it is not
// routed.
static __always_inline int route(struct __sk_buff *skb, const struct ct_val *v, struct bpf_fib_lookup *fib)
{
	*fib = (struct bpf_fib_lookup){
		.family = AF_INET,
		.ipv4_src = v->src,
		.ipv4_dst = v->dst,
		.ifindex = skb->ingress_ifindex,
	};
	int rc = bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH;
}

// send_routed sends the packet out of fib's interface to its next hop.
static __always_inline int send_routed(struct __sk_buff *skb, const struct bpf_fib_lookup *fib)
{
	struct bpf_redir_neigh nh = { .nh_family = AF_INET, .ipv4_nh = fib->ipv4_dst };
	return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
}

// forward sends a translated packet (its TTL ttl, above 1) out of the node
// interface its new destination routes through: it is routed here rather
// than by the stack, so it loses a hop here.
static __always_inline int forward(struct __sk_buff *skb, const struct ct_val *v, __u8 ttl)
{
	dec_ttl(skb, ttl);
	struct bpf_fib_lookup fib;
	if (!route(skb, v, &fib))
		return TC_ACT_SHOT;
	return send_routed(skb, &fib);
}

// remote says whether dst routes out of a node interface: an endpoint on
// another node.
static __always_inline int remote(struct __sk_buff *skb, const __be32 *src, const __be32 *dst)
{
	struct bpf_fib_lookup fib = {
		.family = AF_INET,
		.ipv4_src = *src,
		.ipv4_dst = *dst,
		.ifindex = skb->ingress_ifindex,
	};
	int rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return 0;
	__u32 ifindex = fib.ifindex;
	return bpf_map_lookup_elem(&np_devices, &ifindex) != NULL;
}

// The kernel's conntrack lookup (nf_conntrack's kfuncs). They are
// declared weak: without them (a kernel built without nf_conntrack's BPF
// support, or its module not loaded) the programs still load and find no
// flow of the kernel's (in_kernel_ct, masq.h). Whether they are there is
// np_kernel_ct, which svcproxy sets at load from the kernel's BTF, not
// bpf_ksym_exists: the loader cannot take the address of a kfunc that a
// module (nf_conntrack.ko, as most distributions build it) provides, and
// the kernel refuses the load; a constant lets the verifier drop the calls
// where they are missing. nf_conn is the kernel's: the
// programs only hold a pointer to it, but a declaration without a body
// would not match the kernel's type. ct_lookup_opts is the layout every
// kernel with the lookup accepts (12 bytes: no conntrack zone).
struct nf_conn {
	int unused;
};
struct ct_lookup_opts {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u8 reserved[2];
};
extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *skb, struct bpf_sock_tuple *tuple, __u32 tuple_size,
					 struct ct_lookup_opts *opts, __u32 opts_size) __ksym __weak;
extern void bpf_ct_release(struct nf_conn *ct) __ksym __weak;

volatile const __u8 np_kernel_ct = 0;

// sock_tuple is the kernel's conntrack tuple of k, and its size.
static __always_inline __u32 sock_tuple(const struct ct_key *k, struct bpf_sock_tuple *t)
{
	t->ipv4.saddr = k->src;
	t->ipv4.daddr = k->dst;
	t->ipv4.sport = k->sport;
	t->ipv4.dport = k->dport;
	return sizeof(t->ipv4);
}

// last_hop says whether a packet this program would forward out of a node
// interface (at: translated, or tunnelled to a peer) has no hop left (ttl,
// the IPv6 hop limit alike): the kernel's forwarding would drop it and
// answer time exceeded, with the packet as it came (its conntrack undoing
// the translation in the quote). The answer goes from the address the
// packet was sent to, the frontend's or the masquerade address.
static __always_inline int last_hop(__u8 ttl, __u8 at)
{
	return (at == CT_AT_INGRESS_FWD || at == CT_AT_TUNNEL) && ttl <= 1;
}

#endif
