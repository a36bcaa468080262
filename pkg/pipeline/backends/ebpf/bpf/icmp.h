// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// ICMP errors about the flows the tc programs translate (included by
// nodeport.c, whose conntrack table and helpers it uses), translated as the
// kernel's conntrack translates the errors related to a NATed flow: an
// error quotes a packet as it left this node, translated; the error goes
// to that packet's sender as it sent it. Without this, path MTU discovery
// through a node port breaks (fragmentation needed from a router toward an
// endpoint on another node reaches the node, not the client), and a client
// or an endpoint never hears that the other end is unreachable.
//
// The quoted packet is a direction of a flow after its rewrite; its
// reverse is the key of the other direction's entry, whose rewrite names
// the flow as the quoted packet's sender saw it:
//   - the quote becomes the packet as its sender sent it (addresses, ports,
//     the quoted IPv4 header's checksum and, where quoted, the L4
//     checksum), the ICMP checksum updated;
//   - the error's destination becomes that sender, and its source the
//     address the sender talked to where the flow translated it (the
//     frontend, the masquerade address), as the kernel's conntrack does;
//   - it goes where that other direction's packets go: forwarded out of a
//     node interface (one hop less), up the stack to a local endpoint, or,
//     at egress, on to the client.
// np_ingress translates the errors arriving from outside, np_egress those
// the node or its local endpoints send (a local endpoint's port
// unreachable, the stack's own errors about a packet it forwarded to one).
// A redirect about a flow is dropped, as the kernel's conntrack drops one
// about a NATed flow. A masqueraded flow's reply entry that np_ct evicted
// is made again first (masq.h's rebuilt_reply). An error about no live
// flow of the table is left as it came.

#define ICMP_SOURCE_QUENCH 4
#define ICMP_REDIRECT 5
#define ICMP_PARAMETERPROB 12

// quoted is the start of the packet an error quotes: its IPv4 header and
// its L4 header as far as a TCP header goes (the ports, then UDP's length
// and checksum at l4[0..3], or TCP's checksum at l4[12..13]).
struct quoted {
	struct iphdr ip;
	__be16 sport;
	__be16 dport;
	__u8 l4[16];
};

// The bytes of the quote the kernel's minimum (RFC 792) guarantees: the
// IPv4 header and 8 bytes of L4 header; a longer quote holds a whole TCP
// header, with its checksum.
#define QUOTE_MIN (sizeof(struct iphdr) + 8)

// icmp_err is an IPv4 ICMP error as it follows the Ethernet header.
struct icmp_err {
	struct iphdr ip;
	struct icmphdr icmp;
	struct quoted in;
};

// icmp_is_err is the kernel's: the types that quote a packet.
static __always_inline int icmp_is_err(__u8 type)
{
	switch (type) {
	case ICMP_DEST_UNREACH:
	case ICMP_SOURCE_QUENCH:
	case ICMP_REDIRECT:
	case ICMP_TIME_EXCEEDED:
	case ICMP_PARAMETERPROB:
		return 1;
	}
	return 0;
}

// csum_rewrite is what the checksum check becomes when the len bytes at
// from it covers are replaced by those at to (len a multiple of 4).
static __always_inline __sum16 csum_rewrite(void *from, void *to, __u32 len, __sum16 check)
{
	return fold(bpf_csum_diff(from, len, to, len, (__u16)~check));
}

// load_icmp_err reads an ICMP error about a TCP or UDP packet into e, and
// returns the bytes of its quote it read (0: not one the table can hold).
static __always_inline __u32 load_icmp_err(struct __sk_buff *skb, struct icmp_err *e)
{
	const __u32 head = sizeof(*e) - sizeof(e->in);
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return 0;
	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr), e, head + QUOTE_MIN))
		return 0;
	// The quote's length is the IPv4 packet's, not the frame's (which may
	// be padded).
	__u32 quote = QUOTE_MIN;
	if (bpf_ntohs(e->ip.tot_len) >= sizeof(*e)) {
		quote = sizeof(e->in);
		if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr), e, sizeof(*e)))
			return 0;
	}
	// Options and fragments, in the error or its quote, are the stack's.
	if (e->ip.ihl != 5 || e->ip.frag_off & bpf_htons(0x3fff) || e->ip.protocol != IPPROTO_ICMP)
		return 0;
	if (!icmp_is_err(e->icmp.type) || e->in.ip.ihl != 5 || e->in.ip.frag_off & bpf_htons(0x1fff))
		return 0;
	if (e->in.ip.protocol != IPPROTO_TCP && e->in.ip.protocol != IPPROTO_UDP)
		return 0;
	return quote;
}

// unquote gives e's quote the addresses and ports of v's flow reversed (the
// packet as its sender sent it), with its checksums, and e's ICMP checksum.
static __always_inline void unquote(struct icmp_err *e, __u32 quote, const struct ct_val *v)
{
	struct quoted q = e->in;
	q.ip.saddr = v->dst;
	q.ip.daddr = v->src;
	q.sport = v->dport;
	q.dport = v->sport;
	q.ip.check = csum_rewrite(&e->in.ip.saddr, &q.ip.saddr, 8, e->in.ip.check);
	// The L4 checksum covers the addresses (its pseudo-header) and the
	// ports, 12 bytes in a row here. UDP's 0 is none; a result of 0 is
	// sent as its complement.
	__sum16 *l4sum = NULL;
	if (q.ip.protocol == IPPROTO_UDP && *(__sum16 *)&q.l4[2])
		l4sum = (__sum16 *)&q.l4[2];
	else if (q.ip.protocol == IPPROTO_TCP && quote == sizeof(q))
		l4sum = (__sum16 *)&q.l4[12];
	if (l4sum) {
		__sum16 c = csum_rewrite(&e->in.ip.saddr, &q.ip.saddr, 12, *l4sum);
		if (!c && q.ip.protocol == IPPROTO_UDP)
			c = 0xffff;
		*l4sum = c;
	}
	if (quote == sizeof(q))
		e->icmp.checksum = csum_rewrite(&e->in, &q, sizeof(q), e->icmp.checksum);
	else
		e->icmp.checksum = csum_rewrite(&e->in, &q, QUOTE_MIN, e->icmp.checksum);
	e->in = q;
}

// icmp_error translates an ICMP error about a live flow of the table whose
// other direction is translated where the program runs (at egress or not),
// and returns the verdict.
static __always_inline int icmp_error(struct __sk_buff *skb, int egress)
{
	struct icmp_err e = {};
	__u32 quote = load_icmp_err(skb, &e);
	if (!quote)
		return TC_ACT_OK;
	struct ct_key k = { .src = e.in.ip.daddr, .dst = e.in.ip.saddr, .sport = e.in.dport, .dport = e.in.sport,
			    .proto = e.in.ip.protocol };
	struct ct_val *found = bpf_map_lookup_elem(&np_ct, &k);
	// The reply entry of a masqueraded flow that np_ct evicted is made
	// again from the flow's reservation, as its next reply would make it:
	// an error from the endpoint's side about the flow (fragmentation
	// needed) is no less the client's to hear.
	if (!found && !egress && snat_range(k.dport))
		found = rebuilt_reply(&k, bpf_ktime_get_ns());
	// A flow tunnelled to a peer has its other direction there: an error
	// about its replies is not this node's to translate.
	if (!found || found->at == CT_AT_TUNNEL || (found->at == CT_AT_EGRESS) != egress || expired(found, k.proto, bpf_ktime_get_ns()))
		return TC_ACT_OK;
	// The kernel's conntrack drops a redirect about a NATed flow: the
	// route it names is the translated flow's, which its sender never used.
	if (e.icmp.type == ICMP_REDIRECT)
		return TC_ACT_SHOT;
	struct ct_val v = *found;
	// An error forwarded from here loses a hop; none is sent about one that
	// has none left.
	if (v.at == CT_AT_INGRESS_FWD && e.ip.ttl <= 1)
		return TC_ACT_SHOT;
	struct ct_val out = { .src = v.src == k.src ? e.ip.saddr : v.src, .dst = v.dst };
	struct iphdr ip = e.ip;
	ip.saddr = out.src;
	ip.daddr = out.dst;
	ip.check = csum_rewrite(&e.ip.saddr, &ip.saddr, 8, e.ip.check);
	e.ip = ip;
	unquote(&e, quote, &v);
	__u32 len = sizeof(e) - sizeof(e.in) + QUOTE_MIN;
	if (quote == sizeof(e.in))
		len = sizeof(e);
	if (bpf_skb_store_bytes(skb, sizeof(struct ethhdr), &e, len, BPF_F_RECOMPUTE_CSUM))
		return TC_ACT_SHOT;
	if (v.at == CT_AT_INGRESS_FWD)
		return forward(skb, &out, e.ip.ttl);
	return TC_ACT_OK;
}
