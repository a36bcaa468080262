// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Direct server return's tunnel for IPv6, IPv6 in IPv6 (next header 41),
// included by nodeport.c after IPv6's conntrack table and helpers: what
// tunnel.h does for IPv4, with a 40-byte outer header. The outer header
// copies the inner one's traffic class and flow label, so that ECN and
// the underlay's ECMP see the flow; IPv6 is never fragmented on the way,
// so a packet too big for the link with that header is answered with
// packet too big.

#ifndef SVCPROXY_TUNNEL6_H
#define SVCPROXY_TUNNEL6_H

#define IPPROTO_IPV6_OUTER 41
#define NP_TUNNEL6_OVERHEAD ((__s32)sizeof(struct ipv6hdr))
#define NP_TUNNEL6_MSS_OVERHEAD (NP_TUNNEL6_OVERHEAD + sizeof(struct ipv6hdr) + sizeof(struct tcphdr))

// BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (kernel 6.3), as NP_ADJ_ROOM_DECAP_L3_IPV4.
#define NP_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)

// tunnel_out6 is tunnel_out for IPv6: it encapsulates a packet of flow v
// (its hop limit hops) to the endpoint's node and sends it out of the
// node interface that node routes through, one hop less.
static __noinline int tunnel_out6(struct __sk_buff *skb, const struct ct_val6 *v, __u32 hops)
{
	struct bpf_fib_lookup fib;
	if (!route6(skb, v, &fib))
		return TC_ACT_SHOT;
	__u32 out = fib.ifindex;
	if (!bpf_map_lookup_elem(&np_devices, &out))
		return TC_ACT_SHOT;
	__u32 mtu = 0;
	if (bpf_check_mtu(skb, out, &mtu, NP_TUNNEL6_OVERHEAD, 0) == BPF_MTU_CHK_RET_FRAG_NEEDED)
		return packet_too_big6(skb, mtu - NP_TUNNEL6_OVERHEAD);
	struct ipv6hdr ip;
	if (bpf_skb_load_bytes(skb, IP6_OFF, &ip, sizeof(ip)))
		return TC_ACT_SHOT;
	__u8 left = hops - 1;
	bpf_skb_store_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, hop_limit), &left, 1, 0);
	if (bpf_skb_adjust_room(skb, NP_TUNNEL6_OVERHEAD, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6))
		return TC_ACT_SHOT;
	// The inner header becomes the outer one but for its length, next
	// header, hop limit and addresses.
	ip.payload_len = bpf_htons(bpf_ntohs(ip.payload_len) + NP_TUNNEL6_OVERHEAD);
	ip.nexthdr = IPPROTO_IPV6_OUTER;
	ip.hop_limit = NP_TUNNEL_TTL;
	__builtin_memcpy(&ip.saddr, &v->src, sizeof(v->src));
	__builtin_memcpy(&ip.daddr, &v->dst, sizeof(v->dst));
	if (bpf_skb_store_bytes(skb, IP6_OFF, &ip, sizeof(ip), 0))
		return TC_ACT_SHOT;
	return send_routed6(skb, &fib);
}

// tunnel_flow6 is tunnel_flow for IPv6.
static __noinline int tunnel_flow6(struct __sk_buff *skb, const struct pkt6 *p, const struct np_be6 *be, __u64 now)
{
	struct in6 ep = be->addr;
	struct np_tunnel6 *t = bpf_map_lookup_elem(&np_tunnels6, &ep);
	__u32 zero = 0;
	struct np_cfg6 *cfg = bpf_map_lookup_elem(&np_config6, &zero);
	if (!t || !cfg || in6_zero(&cfg->snat_addr))
		return NP_NO_TUNNEL;
	struct ct_val6 fwd = { .src = cfg->snat_addr, .dst = t->node, .sport = p->k.sport, .dport = p->k.dport,
			       .at = CT_AT_TUNNEL, .seen = now };
	if (p->tcp_flags & TCP_RST)
		fwd.state = CT_CLOSED;
	else if (p->tcp_flags & TCP_FIN)
		fwd.state = CT_CLOSING;
	bpf_map_update_elem(&np_ct6, &p->k, &fwd, BPF_ANY);
	return NP_TUNNELLED;
}

// ip6ip6_pkt is an IPv6-in-IPv6 packet's headers and the inner packet's
// ports.
struct ip6ip6_pkt {
	struct ipv6hdr outer;
	struct ipv6hdr inner;
	__be16 sport;
	__be16 dport;
};

// tunnelled_frontend6 is tunnelled_frontend for IPv6.
static __always_inline struct np_val *tunnelled_frontend6(const struct ct_key6 *f)
{
	struct np_key6 k = { .addr = f->dst, .port = f->dport, .proto = f->proto, .scope = NP_SCOPE_TUNNEL };
	struct np_val *sv = bpf_map_lookup_elem(&np_services6, &k);
	if (sv || !bpf_map_lookup_elem(&np_peers6, &f->dst))
		return sv;
	k.addr = (struct in6){};
	return bpf_map_lookup_elem(&np_services6, &k);
}

// tunnelled_here6 is tunnelled_here for IPv6: the outer header's next
// header is the inner packet (no extension header), the inner one's TCP
// or UDP (so neither is a fragment).
static __always_inline int tunnelled_here6(const struct ip6ip6_pkt *h)
{
	struct ct_key6 k = { .sport = h->sport, .dport = h->dport, .proto = h->inner.nexthdr };
	__builtin_memcpy(&k.src, &h->outer.saddr, sizeof(k.src));
	if (h->outer.nexthdr != IPPROTO_IPV6_OUTER || !bpf_map_lookup_elem(&np_peers6, &k.src))
		return 0;
	__builtin_memcpy(&k.dst, &h->outer.daddr, sizeof(k.dst));
	__u32 zero = 0;
	struct np_cfg6 *cfg = bpf_map_lookup_elem(&np_config6, &zero);
	if (!cfg || in6_zero(&cfg->snat_addr) || !in6_eq(&cfg->snat_addr, &k.dst))
		return 0;
	if (h->inner.version != 6 || (k.proto != IPPROTO_TCP && k.proto != IPPROTO_UDP))
		return 0;
	__builtin_memcpy(&k.src, &h->inner.saddr, sizeof(k.src));
	__builtin_memcpy(&k.dst, &h->inner.daddr, sizeof(k.dst));
	struct ct_val6 *v = bpf_map_lookup_elem(&np_ct6, &k);
	if (v && v->flags & CT_F_TUNNELED)
		return 1;
	return tunnelled_frontend6(&k) != NULL;
}

// is_ip6ip6 says whether the frame is IPv6 carrying IPv6 right after its
// header.
static __always_inline int is_ip6ip6(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	struct ipv6hdr *ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > (void *)(long)skb->data_end || skb->protocol != bpf_htons(ETH_P_IPV6))
		return 0;
	return ip->nexthdr == IPPROTO_IPV6_OUTER;
}

// tunnel_in6 is tunnel_in for IPv6.
static __noinline int tunnel_in6(struct __sk_buff *skb)
{
	struct ip6ip6_pkt h;
	if (bpf_skb_load_bytes(skb, IP6_OFF, &h, sizeof(h)) || !tunnelled_here6(&h))
		return TC_ACT_OK;
	if (bpf_skb_adjust_room(skb, -NP_TUNNEL6_OVERHEAD, BPF_ADJ_ROOM_MAC, NP_ADJ_ROOM_DECAP_L3_IPV6))
		return TC_ACT_SHOT;
	return NP_DECAPSULATED;
}

// clamp_mss6 is clamp_mss for IPv6.
static __always_inline void clamp_mss6(struct __sk_buff *skb, const struct pkt6 *p)
{
	clamp_mss_at(skb, p->l4, NP_TUNNEL6_MSS_OVERHEAD);
}
#endif
