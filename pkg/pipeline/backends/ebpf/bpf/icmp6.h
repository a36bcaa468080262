// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// ICMPv6 errors about the IPv6 flows the tc programs translate (included
// by nodeport.c after the IPv6 flow logic): icmp.h's translation for
// IPv6. An error (destination unreachable, packet too big, time exceeded,
// parameter problem) quotes a packet as it left this node, translated;
// the quote's reverse is the key of the flow's other direction, whose
// rewrite names the flow as the quote's sender saw it. The quote becomes
// the packet as its sender sent it (addresses, ports and, where quoted,
// the L4 checksum), the error goes to that sender from the address it
// talked to, and the ICMPv6 checksum (which covers the addresses too)
// follows. Without this, path MTU discovery through a masqueraded IPv6
// node port breaks: a router's packet too big reaches the node's address.

#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_PARAMPROB 4

// quoted6 is the start of the packet an error quotes: its IPv6 header and
// its L4 header as far as a TCP header goes.
struct quoted6 {
	struct ipv6hdr ip;
	__be16 sport;
	__be16 dport;
	__u8 l4[16];
};

#define QUOTE6_MIN (sizeof(struct ipv6hdr) + 8)

struct icmp6_in {
	struct ipv6hdr ip;
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__u32 rest;
	struct quoted6 in;
};

// load_icmp6_err reads an ICMPv6 error about a TCP or UDP packet into e,
// and returns the bytes of its quote it read (0: not one the table holds).
static __always_inline __u32 load_icmp6_err(struct __sk_buff *skb, struct icmp6_in *e)
{
	const __u32 head = sizeof(*e) - sizeof(e->in);
	if (bpf_skb_load_bytes(skb, IP6_OFF, e, head + QUOTE6_MIN))
		return 0;
	__u32 quote = QUOTE6_MIN;
	if (bpf_ntohs(e->ip.payload_len) >= sizeof(*e) - sizeof(e->ip)) {
		quote = sizeof(e->in);
		if (bpf_skb_load_bytes(skb, IP6_OFF, e, sizeof(*e)))
			return 0;
	}
	// Extension headers, in the error or its quote, are the stack's.
	if (e->ip.nexthdr != IPPROTO_ICMPV6_ || e->type < ICMPV6_DEST_UNREACH || e->type > ICMPV6_PARAMPROB)
		return 0;
	if (e->in.ip.nexthdr != IPPROTO_TCP && e->in.ip.nexthdr != IPPROTO_UDP)
		return 0;
	return quote;
}

// unquote6 gives e's quote the addresses and ports of v's flow reversed,
// with its L4 checksum where quoted, and updates the ICMPv6 checksum for
// the quote's change.
static __always_inline void unquote6(struct icmp6_in *e, __u32 quote, const struct ct_val6 *v)
{
	struct quoted6 q = e->in;
	__builtin_memcpy(&q.ip.saddr, &v->dst, 16);
	__builtin_memcpy(&q.ip.daddr, &v->src, 16);
	q.sport = v->dport;
	q.dport = v->sport;
	// The L4 checksum covers the addresses (its pseudo-header) and the
	// ports, 36 bytes in a row here.
	__sum16 *l4sum = NULL;
	if (q.ip.nexthdr == IPPROTO_UDP)
		l4sum = (__sum16 *)&q.l4[2];
	else if (quote == sizeof(q))
		l4sum = (__sum16 *)&q.l4[12];
	if (l4sum) {
		__sum16 c = csum_rewrite(&e->in.ip.saddr, &q.ip.saddr, 36, *l4sum);
		if (!c && q.ip.nexthdr == IPPROTO_UDP)
			c = 0xffff;
		*l4sum = c;
	}
	if (quote == sizeof(q))
		e->checksum = csum_rewrite(&e->in, &q, sizeof(q), e->checksum);
	else
		e->checksum = csum_rewrite(&e->in, &q, QUOTE6_MIN, e->checksum);
	e->in = q;
}

// icmp6_error translates an ICMPv6 error about a live IPv6 flow whose
// other direction is translated where the program runs, and returns the
// verdict (a function of its own: its frame is not added to the flow
// logic's).
static __noinline int icmp6_error(struct __sk_buff *skb, int egress)
{
	struct icmp6_in e = {};
	__u32 quote = load_icmp6_err(skb, &e);
	if (!quote)
		return TC_ACT_OK;
	struct ct_key6 k = { .sport = e.in.dport, .dport = e.in.sport, .proto = e.in.ip.nexthdr };
	__builtin_memcpy(&k.src, &e.in.ip.daddr, 16);
	__builtin_memcpy(&k.dst, &e.in.ip.saddr, 16);
	struct ct_val6 *found = bpf_map_lookup_elem(&np_ct6, &k);
	// As icmp_error, an evicted reply entry is made again, and a tunnelled
	// flow's errors are not this node's.
	if (!found && !egress && snat_range(k.dport))
		found = rebuilt_reply6(&k, bpf_ktime_get_ns());
	if (!found || found->at == CT_AT_TUNNEL || (found->at == CT_AT_EGRESS) != egress || expired6(found, k.proto, bpf_ktime_get_ns()))
		return TC_ACT_OK;
	struct ct_val6 v = *found;
	if (v.at == CT_AT_INGRESS_FWD && e.ip.hop_limit <= 1)
		return TC_ACT_SHOT;
	struct ct_val6 out = { .dst = v.dst };
	if (in6_eq(&v.src, &k.src))
		__builtin_memcpy(&out.src, &e.ip.saddr, 16);
	else
		out.src = v.src;
	// The ICMPv6 checksum covers the outer addresses (its pseudo-header).
	struct in6 addrs[2] = { out.src, out.dst };
	e.checksum = csum_rewrite(&e.ip.saddr, addrs, 32, e.checksum);
	__builtin_memcpy(&e.ip.saddr, addrs, 32);
	unquote6(&e, quote, &v);
	__u32 len = sizeof(e) - sizeof(e.in) + QUOTE6_MIN;
	if (quote == sizeof(e.in))
		len = sizeof(e);
	if (bpf_skb_store_bytes(skb, IP6_OFF, &e, len, 0))
		return TC_ACT_SHOT;
	if (v.at == CT_AT_INGRESS_FWD)
		return forward6(skb, &out, e.ip.hop_limit);
	return TC_ACT_OK;
}
