// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Direct server return's tunnel, IPv4 in IPv4 (IPIP, protocol 4), included
// by nodeport.c after IPv4's conntrack table and helpers.
//
// The node a client's packet arrives at (the ingress node) picks an
// endpoint on a peer node as for any flow; np_tunnels names that node,
// and the packet, untouched but for one hop of its TTL, is sent there
// inside an outer header from this node's primary address (tunnel_out).
// The peer strips that header (tunnel_in) and serves the inner packet as
// a flow of its own to one of its local endpoints, keeping the client's
// address, so that the endpoint's replies go to the client from the peer
// directly: the ingress node never sees them.
//
// No metadata travels with the packet: the inner destination is still the
// frontend, which the peer looks up among the frontends of its own that
// take decapsulated packets (NP_SCOPE_TUNNEL).
//
// The outer header costs 20 bytes of each packet the client sends: one
// it would make too big for the link is answered instead (too_big), and
// the peer lowers the MSS its endpoint announces to fit (clamp_mss).

#ifndef SVCPROXY_TUNNEL_H
#define SVCPROXY_TUNNEL_H

#define IPPROTO_IPIP_OUTER 4

// The outer header's bytes (NP_TUNNEL_OVERHEAD) and TTL.
#define NP_TUNNEL_OVERHEAD ((__s32)sizeof(struct iphdr))
#define NP_TUNNEL_TTL 64
#define IP_DF 0x4000

// BPF_F_ADJ_ROOM_DECAP_L3_IPV4 (kernel 6.3): the header left after a
// shrink is IPv4. The build's uapi headers may be older than the kernel,
// and a macro of the enumerator's own name would break newer headers.
#define NP_ADJ_ROOM_DECAP_L3_IPV4 (1ULL << 7)

// NP_DECAPSULATED is tunnel_in's answer for a packet it decapsulated: the
// program hands it to np_ingress_tun (np_progs_tun) with a tail call,
// made from the program itself, whose frame is the only one below it.
#define NP_DECAPSULATED (-3)

// NP_NO_TUNNEL is tunnel_flow's answer when the endpoint has no tunnel:
// the flow takes the path of any other.
#define NP_NO_TUNNEL (-4)

// NP_TUNNELLED is new_flow's answer for a flow it recorded as tunnelled
// (tunnel_flow): the packet is to be sent through the tunnel.
#define NP_TUNNELLED (-5)

// dsr_count counts a packet direct server return drops (NP_STAT_DSR_*),
// in family's counters.
static __always_inline void dsr_count(__u32 stat, int ipv6)
{
	np_count(&np_stats_dsr, stat + (ipv6 ? NP_STATS_DSR : 0));
}

// too_big answers a packet (its IPv4 header inner) that the tunnel's
// header would make too big for the next hop's mtu: with DF, fragmentation
// needed, with room left for that header (the client's path MTU discovery
// then sends packets that fit); without, it is dropped and counted, as BPF
// cannot fragment it. A GSO packet passes: its segments shrink by the
// header (bpf_skb_adjust_room lowers gso_size).
static __always_inline int too_big(struct __sk_buff *skb, const struct iphdr *inner, __u32 mtu)
{
	if (inner->frag_off & bpf_htons(IP_DF))
		return frag_needed(skb, mtu - NP_TUNNEL_OVERHEAD);
	dsr_count(NP_STAT_DSR_TOO_BIG, 0);
	return TC_ACT_SHOT;
}

// tunnel_out encapsulates a packet of flow v (CT_AT_TUNNEL: src this
// node's primary address, dst the endpoint's node) whose TTL is ttl, and
// sends it out of the node interface the endpoint's node routes through.
// The inner packet loses one hop, as a forwarded one would; the outer
// header copies its TOS (ECN included) and DF bit, as a tunnel device
// does. A packet the outer header would make too big for the next hop is
// answered instead (too_big). Not inline: np_ingress's verifier budget is
// spent on the flow logic.
static __noinline int tunnel_out(struct __sk_buff *skb, const struct ct_val *v, __u32 ttl)
{
	struct bpf_fib_lookup fib;
	if (!route(skb, v, &fib))
		return TC_ACT_SHOT;
	// A peer reached otherwise than through a node interface (a route
	// into an overlay device) would not see the packet on the interface
	// its programs decapsulate on.
	__u32 out = fib.ifindex;
	if (!bpf_map_lookup_elem(&np_devices, &out))
		return TC_ACT_SHOT;
	struct iphdr inner;
	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &inner, sizeof(inner)))
		return TC_ACT_SHOT;
	__u32 mtu = 0;
	if (bpf_check_mtu(skb, out, &mtu, NP_TUNNEL_OVERHEAD, 0) == BPF_MTU_CHK_RET_FRAG_NEEDED)
		return too_big(skb, &inner, mtu);
	dec_ttl(skb, (__u8)ttl);
	if (bpf_skb_adjust_room(skb, NP_TUNNEL_OVERHEAD, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4))
		return TC_ACT_SHOT;
	struct iphdr outer = {
		.version = 4,
		.ihl = 5,
		.tos = inner.tos,
		.tot_len = bpf_htons(bpf_ntohs(inner.tot_len) + NP_TUNNEL_OVERHEAD),
		.id = inner.id,
		.frag_off = inner.frag_off & bpf_htons(IP_DF),
		.ttl = NP_TUNNEL_TTL,
		.protocol = IPPROTO_IPIP_OUTER,
		.saddr = v->src,
		.daddr = v->dst,
	};
	outer.check = fold(bpf_csum_diff(NULL, 0, (__be32 *)&outer, sizeof(outer), 0));
	if (bpf_skb_store_bytes(skb, sizeof(struct ethhdr), &outer, sizeof(outer), 0))
		return TC_ACT_SHOT;
	return send_routed(skb, &fib);
}

// tunnel_flow records the flow of p, a new flow's first packet, to be,
// its endpoint, as one through the tunnel to be's node (np_tunnels):
// NP_TUNNELLED, and the caller's frame, the program's, sends the packet
// (tunnel_out: a frame of its own below this one's and new_flow's would
// pass the verifier's bound on the frames' sum). NP_NO_TUNNEL when be has
// no tunnel (its node does not decapsulate) or this node no primary
// address: the flow is then translated as any other. Only the client's
// direction is recorded (the outer addresses, the packet's own ports): no
// reply comes back here.
static __noinline int tunnel_flow(struct __sk_buff *skb, const struct pkt *p, const struct np_be *be, __u64 now)
{
	__be32 ep = be->addr;
	struct np_tunnel *t = bpf_map_lookup_elem(&np_tunnels, &ep);
	__u32 zero = 0;
	struct np_cfg *cfg = bpf_map_lookup_elem(&np_config, &zero);
	if (!t || !cfg || !cfg->snat_addr)
		return NP_NO_TUNNEL;
	struct ct_val fwd = { .src = cfg->snat_addr, .dst = t->node, .sport = p->k.sport, .dport = p->k.dport,
			      .at = CT_AT_TUNNEL, .seen = now };
	if (p->tcp_flags & TCP_RST)
		fwd.state = CT_CLOSED;
	else if (p->tcp_flags & TCP_FIN)
		fwd.state = CT_CLOSING;
	bpf_map_update_elem(&np_ct, &p->k, &fwd, BPF_ANY);
	if (last_hop(p->ttl, fwd.at))
		return time_exceeded(skb);
	return NP_TUNNELLED;
}

// is_ipip says whether the frame is IPv4 carrying IPv4 (IPIP).
static __always_inline int is_ipip(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > (void *)(long)skb->data_end || skb->protocol != bpf_htons(ETH_P_IP))
		return 0;
	return ip->protocol == IPPROTO_IPIP_OUTER;
}

// ipip_pkt is an IPIP packet's outer and inner headers and the inner
// packet's ports.
struct ipip_pkt {
	struct iphdr outer;
	struct iphdr inner;
	__be16 sport;
	__be16 dport;
};

// tunnelled_frontend is the frontend of scope NP_SCOPE_TUNNEL a
// decapsulated packet of flow f goes to, or NULL: its destination's,
// else, when that is a peer's address (the client sent it to the peer's
// node port), the node port's on any address.
static __always_inline struct np_val *tunnelled_frontend(const struct ct_key *f)
{
	struct np_key k = { .addr = f->dst, .port = f->dport, .proto = f->proto, .scope = NP_SCOPE_TUNNEL };
	struct np_val *sv = bpf_map_lookup_elem(&np_services, &k);
	if (sv || !bpf_map_lookup_elem(&np_peers, &f->dst))
		return sv;
	k.addr = 0;
	return bpf_map_lookup_elem(&np_services, &k);
}

// tunnelled_here says whether h, an IPIP packet, is one a peer tunnelled
// here for direct server return: from a peer's address to this node's
// primary one, neither header with options or fragmented, the inner
// packet TCP or UDP and of a flow the table holds as tunnelled, or to a
// frontend that takes decapsulated packets. Anything else is someone
// else's IPIP (Calico's or flannel's node to node, whose tunnel device
// must get it) and is left as it came.
static __always_inline int tunnelled_here(const struct ipip_pkt *h)
{
	if (h->outer.ihl != 5 || h->outer.frag_off & bpf_htons(0x3fff))
		return 0;
	if (!bpf_map_lookup_elem(&np_peers, &h->outer.saddr))
		return 0;
	__u32 zero = 0;
	struct np_cfg *cfg = bpf_map_lookup_elem(&np_config, &zero);
	if (!cfg || !cfg->snat_addr || cfg->snat_addr != h->outer.daddr)
		return 0;
	if (h->inner.version != 4 || h->inner.ihl != 5 || h->inner.frag_off & bpf_htons(0x3fff))
		return 0;
	if (h->inner.protocol != IPPROTO_TCP && h->inner.protocol != IPPROTO_UDP)
		return 0;
	struct ct_key k = { .src = h->inner.saddr, .dst = h->inner.daddr, .sport = h->sport, .dport = h->dport,
			    .proto = h->inner.protocol };
	struct ct_val *v = bpf_map_lookup_elem(&np_ct, &k);
	if (v && v->flags & CT_F_TUNNELED)
		return 1;
	return tunnelled_frontend(&k) != NULL;
}

// tunnel_in strips the outer header of an IPIP packet a peer tunnelled
// here (NP_DECAPSULATED); any other packet is left to the stack as it
// came (TC_ACT_OK).
static __noinline int tunnel_in(struct __sk_buff *skb)
{
	struct ipip_pkt h;
	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &h, sizeof(h)))
		return TC_ACT_OK;
	if (h.outer.protocol != IPPROTO_IPIP_OUTER || !tunnelled_here(&h))
		return TC_ACT_OK;
	if (bpf_skb_adjust_room(skb, -NP_TUNNEL_OVERHEAD, BPF_ADJ_ROOM_MAC, NP_ADJ_ROOM_DECAP_L3_IPV4))
		return TC_ACT_SHOT;
	return NP_DECAPSULATED;
}
// What a TCP segment of a tunnelled flow carries besides its payload: the
// outer header, its own IPv4 header and a TCP header without options.
#define NP_TUNNEL_MSS_OVERHEAD (NP_TUNNEL_OVERHEAD + sizeof(struct iphdr) + sizeof(struct tcphdr))
#define TCPOPT_MSS 2
#define TCPOLEN_MSS 4

// clamp_mss lowers the MSS a local endpoint's SYN-ACK (p) announces to a
// client whose flow came through a peer's tunnel to what fits the link's
// MTU with the outer header, so that the client's segments need no
// fragmentation needed on their way (tunnel_out): MSS clamping, as a
// tunnel device's users configure it. The MTU is this interface's,
// assumed the same on the peer's link. The MSS option is looked for
// first among the options, where stacks put it in a SYN-ACK.
static __noinline void clamp_mss(struct __sk_buff *skb, const struct pkt *p)
{
	__u8 hdr[sizeof(struct tcphdr) + TCPOLEN_MSS];
	if (bpf_skb_load_bytes(skb, p->l4, hdr, sizeof(hdr)))
		return;
	__u8 *opt = &hdr[sizeof(struct tcphdr)];
	if (hdr[12] >> 4 < 6 || opt[0] != TCPOPT_MSS || opt[1] != TCPOLEN_MSS)
		return;
	__u32 mtu = 0;
	if (bpf_check_mtu(skb, 0, &mtu, 0, 0) < 0 || mtu <= NP_TUNNEL_MSS_OVERHEAD)
		return;
	__u16 most = mtu - NP_TUNNEL_MSS_OVERHEAD;
	__be16 old = *(__be16 *)&opt[2];
	if (bpf_ntohs(old) <= most)
		return;
	__be16 mss = bpf_htons(most);
	bpf_l4_csum_replace(skb, p->l4 + offsetof(struct tcphdr, check), old, mss, 2);
	bpf_skb_store_bytes(skb, p->l4 + sizeof(struct tcphdr) + 2, &mss, sizeof(mss), 0);
}

#endif
