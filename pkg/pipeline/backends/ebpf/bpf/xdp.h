// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// np_xdp: XDP acceleration of np_ingress (included by nodeport.c, whose
// maps and helpers it uses). A packet of a flow np_ingress forwards out of
// a node interface (CT_AT_INGRESS_FWD: an endpoint on another node, and
// that flow's replies) is rewritten as its table entry says and sent on
// before the kernel allocates an skb for it. Everything else passes to tc
// unchanged, where np_ingress does what it always does:
//   - a flow's first packet (np_ingress picks the endpoint and records
//     both directions), and a packet whose entry expired;
//   - a masqueraded flow's reply whose entry np_ct evicted (np_ingress makes
//     it again from the flow's reservation in np_snat);
//   - a flow to a local endpoint (the stack delivers it, with the
//     masquerade mark, which XDP cannot set);
//   - TCP packets that change the flow's state (SYN, FIN, RST);
//   - a packet without a hop left (np_ingress answers time exceeded);
//   - a reply while the programs drain (np_ingress asks whether it is
//     a kernel conntrack flow's: kernel_flow in flow.h);
//   - a packet whose L4 checksum a sender on this machine left unfinished
//     (l4_csum_partial: only a virtual device such as a veth delivers one);
//   - IPv6 (np_ingress serves it), and what parse leaves to the stack
//     (options, fragments, other protocols);
//   - a next hop whose neighbour is not resolved (bpf_redirect_neigh
//     resolves it), or an interface out of which XDP does not send.

// csum_fold folds a 32-bit sum to the 16-bit one's complement checksum.
static __always_inline __u16 csum_fold(__u64 c)
{
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return ~c;
}

// csum_delta32 and csum_delta16 are what replacing from with to adds to a
// one's complement sum (RFC 1624: the old words' complements and the new
// words), summed inline: a bpf_csum_diff call per checksum costs more
// than the few words a translation changes.
static __always_inline __u64 csum_delta32(__be32 from, __be32 to)
{
	__u32 old = ~from;
	return (old & 0xffff) + (old >> 16) + (to & 0xffff) + (to >> 16);
}

static __always_inline __u64 csum_delta16(__be16 from, __be16 to)
{
	return (__u16)~from + (__u32)to;
}

// xdp_rewrite gives the packet v's addresses and ports, updating the
// checksums incrementally (the L4 checksum's pseudo-header covers the
// addresses too); a UDP datagram without a checksum stays so.
static __always_inline int xdp_rewrite(void *data, void *end, const struct pkt *p, const struct ct_val *v)
{
	struct iphdr *ip = data + sizeof(struct ethhdr);
	__u64 l3 = csum_delta32(p->k.src, v->src) + csum_delta32(p->k.dst, v->dst);
	__u64 l4 = l3 + csum_delta16(p->k.sport, v->sport) + csum_delta16(p->k.dport, v->dport);

	if ((void *)(ip + 1) > end)
		return 0;
	if (p->k.proto == IPPROTO_TCP) {
		struct tcphdr *th = (void *)(ip + 1);
		if ((void *)(th + 1) > end)
			return 0;
		th->check = csum_fold(l4 + (__u16)~th->check);
		th->source = v->sport;
		th->dest = v->dport;
	} else {
		struct udphdr *uh = (void *)(ip + 1);
		if ((void *)(uh + 1) > end)
			return 0;
		if (uh->check) {
			__u16 c = csum_fold(l4 + (__u16)~uh->check);
			uh->check = c ? c : 0xffff;
		}
		uh->source = v->sport;
		uh->dest = v->dport;
	}
	ip->check = csum_fold(l3 + (__u16)~ip->check);
	ip->saddr = v->src;
	ip->daddr = v->dst;
	return 1;
}

// l4_csum_partial reports whether the packet's L4 checksum field holds only
// the sum of its pseudo-header: the checksum a sender on this machine left
// for the device to finish (CHECKSUM_PARTIAL). A veth hands XDP such a
// packet as the sender wrote it, while a NIC delivers complete checksums.
// Sent on as an XDP frame, the packet loses the skb that said the checksum
// was still to be done, and its receiver drops it as corrupt; np_ingress
// sees the skb and keeps its checksum state, so these go to tc. A complete
// checksum that equals its pseudo-header's sum (one in 65536) only takes
// that slower path too.
static __always_inline int l4_csum_partial(void *data, void *end, const struct pkt *p)
{
	struct iphdr *ip = data + sizeof(struct ethhdr);
	__u16 *field = (void *)(ip + 1) +
		       (p->k.proto == IPPROTO_TCP ? offsetof(struct tcphdr, check) : offsetof(struct udphdr, check));

	if ((void *)(field + 1) > end)
		return 0;
	// The pseudo-header's 16-bit words as they lie in the packet, whatever
	// the host's byte order: the one's complement sum does not depend on it.
	__u64 sum = (ip->saddr & 0xffff) + (ip->saddr >> 16) + (ip->daddr & 0xffff) + (ip->daddr >> 16) +
		    bpf_htons(p->k.proto) + bpf_htons((__u16)(bpf_ntohs(ip->tot_len) - sizeof(*ip)));
	return *field == (__u16)~csum_fold(sum);
}

// xdp_dec_ttl takes one off the packet's TTL as dec_ttl does in tc, in the
// same one's-complement steps (the kernel's csum_replace2), so that both
// leave equal headers.
static __always_inline void xdp_dec_ttl(struct iphdr *ip)
{
	__u16 from = bpf_htons((__u16)ip->ttl << 8), to = bpf_htons((__u16)(ip->ttl - 1) << 8);
	__u32 sum = (__u16)~ip->check;
	sum += (__u16)~from;
	sum += to;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->check = ~sum;
	ip->ttl--;
}

SEC("xdp")
int np_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct pkt p = {};

	if (!parse_data(data, end, &p))
		return XDP_PASS;
	if (p.tcp_flags & (TCP_SYN | TCP_FIN | TCP_RST) || p.ttl <= 1)
		return XDP_PASS;
	struct ct_val *v = bpf_map_lookup_elem(&np_ct, &p.k);
	if (!v || v->at != CT_AT_INGRESS_FWD)
		return XDP_PASS;
	// While draining, a reply may be a kernel flow's (kernel_flow): np_ingress
	// asks the kernel's conntrack.
	if (v->reply && draining())
		return XDP_PASS;
	__u64 now = bpf_ktime_get_ns();
	if (expired(v, p.k.proto, now))
		return XDP_PASS;
	if (l4_csum_partial(data, end, &p))
		return XDP_PASS;
	struct ct_val out = *v;
	struct bpf_fib_lookup fib = {
		.family = AF_INET,
		.ipv4_src = out.src,
		.ipv4_dst = out.dst,
		.ifindex = ctx->ingress_ifindex,
	};
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	__u32 oif = fib.ifindex;
	if (!bpf_map_lookup_elem(&np_xdp_out, &oif))
		return XDP_PASS;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end || !xdp_rewrite(data, end, &p, &out))
		return XDP_PASS;
	xdp_dec_ttl(data + sizeof(*eth));
	track(v, &p, v->reply, now);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	if (oif == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(oif, 0);
}
