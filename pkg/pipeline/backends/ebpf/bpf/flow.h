// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Included by nodeport.c once per IP family (as ct.h and masq.h), after
// the family's parsing, rewriting and forwarding: what the tc programs do
// with a TCP or UDP packet of the family, a new flow's endpoint choice
// and translation, and a known flow's rewrite. F(name) is name for IPv4
// and name6 for IPv6; ADDR_BITS is the family's address length.

// pick returns the endpoint of a new flow to frontend sv.
static __always_inline struct F(np_be) *F(pick)(const struct np_val *sv, const struct F(ct_key) *k)
{
	struct np_be_key bk = { .id = sv->id };
	if (sv->flags & NP_F_MAGLEV && sv->msize) {
		void *table = bpf_map_lookup_elem(&F(np_maglev), &bk.id);
		__u32 slot = F(flow_hash)(k) % sv->msize;
		struct F(np_be) *be = table ? bpf_map_lookup_elem(table, &slot) : NULL;
		// A slot past the table is a frontend's size read while a
		// resized table is swapped in: the group's slots still serve.
		if (be)
			return be;
	}
	bk.slot = bpf_get_prandom_u32() % sv->count;
	struct F(np_be) *be = bpf_map_lookup_elem(&F(np_backends), &bk);
	if (be)
		return be;
	// svcproxy writes a record after the slots it counts and deletes a
	// slot after no record counts it, so a slot missing from sv, the
	// record's copy, means the record changed since the copy: pick from
	// the record that replaced it.
	struct F(np_key) fk = { .addr = k->dst, .port = k->dport, .proto = k->proto };
	struct np_val *cur = bpf_map_lookup_elem(&F(np_services), &fk);
	if (!cur)
		return NULL;
	struct np_val now = *cur;
	if (now.count == 0)
		return NULL;
	bk.id = now.id;
	bk.slot = bpf_get_prandom_u32() % now.count;
	return bpf_map_lookup_elem(&F(np_backends), &bk);
}

// allowed says whether a new flow from k's source may use frontend sv:
// only a frontend with source ranges checks, against its group's
// prefixes.
static __always_inline int F(allowed)(const struct np_val *sv, const struct F(ct_key) *k)
{
	if (!(sv->flags & NP_F_RANGES))
		return 1;
	struct F(np_src_key) sk = { .prefixlen = 64 + ADDR_BITS, .id = { (__u32)sv->id, (__u32)(sv->id >> 32) },
				    .addr = k->src };
	return bpf_map_lookup_elem(&F(np_ranges), &sk) != NULL;
}

// in_cluster says whether the flow's client is a pod or a node of the
// cluster (np_ranges under NP_ID_IN_CLUSTER). Direct server return does
// not tunnel its flows: the endpoint's node would answer it beside the
// endpoint or through an overlay, where no tc program translates the
// answer back to the frontend.
static __always_inline int F(in_cluster)(const struct F(ct_key) *k)
{
	struct F(np_src_key) sk = { .prefixlen = 64 + ADDR_BITS, .id = { NP_ID_IN_CLUSTER, 0 }, .addr = k->src };
	return bpf_map_lookup_elem(&F(np_ranges), &sk) != NULL;
}

// choose sets *be to the endpoint of a new flow to sv. With ClientIP
// affinity the client's endpoint is kept while its entry is younger than
// the timeout and the endpoint still in the group; else it is picked, and
// remembered. Each new flow refreshes the entry, as the other modes'
// affinity sets are refreshed per connection.
static __always_inline int F(choose)(const struct np_val *sv, const struct F(ct_key) *k, __u64 now,
				     struct F(np_be) *be)
{
	struct F(aff_key) ak = { .id = sv->id, .client = k->src };
	if (sv->affinity) {
		struct F(aff_val) *a = bpf_map_lookup_elem(&F(np_affinity), &ak);
		if (a && elapsed(now, a->seen) <= (__u64)sv->affinity * NSEC_PER_SEC) {
			struct F(np_member_key) mk = { .id = sv->id, .addr = a->be.addr, .port = a->be.port };
			if (bpf_map_lookup_elem(&F(np_members), &mk)) {
				*be = a->be;
				a->seen = now;
				return 1;
			}
		}
	}
	struct F(np_be) *p = F(pick)(sv, k);
	if (!p)
		return 0;
	*be = *p;
	if (sv->affinity) {
		struct F(aff_val) a = { .be = *p, .seen = now };
		bpf_map_update_elem(&F(np_affinity), &ak, &a, BPF_ANY);
	}
	return 1;
}

// refuse is a frontend's answer when it has no endpoint.
static __always_inline int F(refuse)(struct __sk_buff *skb, const struct F(pkt) *p, const struct np_val *sv)
{
	if (sv->flags & NP_F_DROP || p->tcp_flags & TCP_RST)
		return TC_ACT_SHOT;
	return p->k.proto == IPPROTO_TCP ? F(reset)(skb, p->l4) : F(unreachable)(skb);
}

// draining says whether a drain has begun (np_config's flags).
static __always_inline int F(draining)(void)
{
	__u32 zero = 0;
	struct F(np_cfg) *cfg = bpf_map_lookup_elem(&F(np_config), &zero);
	return cfg && cfg->flags & NP_CFG_DRAINING;
}

// kernel_flow says whether k, a packet that v, a reply entry of a flow
// masqueraded here, would translate, belongs to a flow of the kernel's
// conntrack instead. While the programs drain, the rules masquerade new
// flows to the same endpoints, and the kernel picks their ports without
// seeing this table: it may give one the reply tuple a held flow here
// still claims. The packet is then the kernel's flow's, which is live and
// wants it (the held flow had its answer or is at its end), and goes to
// the stack, which un-NATs it. The lookup is paid only while draining:
// before, the rules take no node port traffic to masquerade.
static __always_inline int F(kernel_flow)(struct __sk_buff *skb, const struct F(ct_key) *k, const struct F(ct_val) *v)
{
	return v->reply && v->at == CT_AT_INGRESS_FWD && F(draining)() && F(in_kernel_ct)(skb, k);
}

// apply translates a packet of a known flow (FLOW_FN: nodeport.c); a
// flow tunnelled to a peer keeps its packets as they are, in the tunnel.
static FLOW_FN int F(apply)(struct __sk_buff *skb, struct F(pkt) *p, struct F(ct_val) *v, __u64 now)
{
	if (F(kernel_flow)(skb, &p->k, v))
		return TC_ACT_OK;
	if (last_hop(p->ttl, v->at))
		return F(time_exceeded)(skb);
	F(track)(v, p, v->reply, now);
	struct F(ct_val) out = *v;
	if (out.at == CT_AT_TUNNEL)
		return F(tunnel_out)(skb, &out, p->ttl);
	F(rewrite)(skb, p, &out);
	if (out.at == CT_AT_INGRESS_FWD)
		return F(forward)(skb, &out, p->ttl);
	return TC_ACT_OK;
}

// masquerade source-NATs a new flow to an endpoint on another node (s
// holds its directions) to the node's address and a free port. Inline in
// new_flow: a frame of its own would add to the frames down to the port
// search's, whose sum the verifier bounds.
static __always_inline int F(masquerade)(struct F(snat_search) *s)
{
	__u32 zero = 0;
	struct F(np_cfg) *cfg = bpf_map_lookup_elem(&F(np_config), &zero);
	if (!cfg || addr_zero(cfg->snat_addr))
		return 0;
	s->fwd.src = cfg->snat_addr;
	s->rev.at = CT_AT_INGRESS_FWD;
	return F(snat_port)(s);
}

// tunnel_lost drops a decapsulated packet that no flow or local endpoint
// here takes, counted: handed to the stack, it would be routed to its
// inner destination, another node's address or an LB IP, back out.
static __always_inline int F(tunnel_lost)(void)
{
	dsr_count(NP_STAT_DSR_NO_FLOW, ADDR_BITS == 128);
	return TC_ACT_SHOT;
}

// new_flow translates the first packet of a flow to frontend sv and
// records both directions (a function of its own, as ingress). With
// direct server return (NP_F_DSR) an endpoint on a peer node other than
// the client itself (whose own address as a source it would drop) is
// reached by tunnel, unless the client is inside the cluster. A packet a
// peer tunnelled here (tunneled) goes to a local endpoint, its flow's
// entries flagged.
static __noinline int F(new_flow)(struct __sk_buff *skb, struct F(pkt) *p, const struct np_val *sv, __u64 now,
				  const int tunneled)
{
	if (!F(allowed)(sv, &p->k))
		return TC_ACT_SHOT;
	if (sv->count == 0)
		return tunneled ? F(tunnel_lost)() : F(refuse)(skb, p, sv);
	struct F(np_be) be;
	if (!F(choose)(sv, &p->k, now, &be))
		return TC_ACT_SHOT;
	if (!tunneled && sv->flags & NP_F_DSR && !addr_eq(be.addr, p->k.src) && !F(in_cluster)(&p->k)) {
		int rc = F(tunnel_flow)(skb, p, &be, now);
		if (rc != NP_NO_TUNNEL)
			return rc;
	}
	// The reply direction rewrites back to the frontend, seen by the
	// client as the other end. Both directions are built where the
	// masquerade port search takes them.
	struct F(snat_search) s = {
		.fwd = { .src = p->k.src, .dst = be.addr, .sport = p->k.sport, .dport = be.port, .seen = now },
		.rev = { .src = p->k.dst, .dst = p->k.src, .sport = p->k.dport, .dport = p->k.sport, .seen = now,
			 .at = CT_AT_EGRESS, .reply = 1 },
		.skb = skb,
		.now = now,
		.proto = p->k.proto,
	};
	struct F(ct_val) *fwd = &s.fwd, *rev = &s.rev;
	// desired's masquerade: a remote endpoint's flow is source-NATed
	// here, its replies coming back to this node. A local endpoint's
	// reply comes back by itself, so its flow keeps the client's
	// address: nothing else here would masquerade it, and a mark asking
	// nftables rules to would have rules that arrive later (a switch to
	// nftables mode) masquerade the open flow midway, which resets it.
	if (F(remote)(skb, &p->k.src, &be.addr)) {
		// A peer tunnels to this node for its own endpoints: a remote
		// one (this node's State lagging) is not the packet's to reach.
		if (tunneled)
			return F(tunnel_lost)();
		fwd->at = CT_AT_INGRESS_FWD;
		if (sv->flags & NP_F_MASQ && !F(masquerade)(&s))
			return TC_ACT_SHOT;
	}
	if (tunneled)
		fwd->flags = rev->flags = CT_F_TUNNELED;
	if (addr_eq(fwd->src, p->k.src)) {
		struct F(ct_key) rk = F(reverse)(fwd, p->k.proto);
		bpf_map_update_elem(&F(np_ct), &rk, rev, BPF_ANY);
	}
	if (p->tcp_flags & TCP_RST)
		fwd->state = rev->state = CT_CLOSED;
	else if (p->tcp_flags & TCP_FIN)
		fwd->state = rev->state = CT_CLOSING;
	bpf_map_update_elem(&F(np_ct), &p->k, fwd, BPF_ANY);
	if (last_hop(p->ttl, fwd->at))
		return F(time_exceeded)(skb);
	F(rewrite)(skb, p, fwd);
	if (fwd->at == CT_AT_INGRESS_FWD)
		return F(forward)(skb, fwd, p->ttl);
	return TC_ACT_OK;
}

#ifndef NP_UNPARSED
// NP_UNPARSED is ingress's and egress's answer for a packet parse leaves:
// the program hands it to the family's ICMP error translation (unparsed),
// called from the program itself so that its stack frame is not added to
// theirs.
#define NP_UNPARSED (-2)
#endif

// ingress_at is np_ingress for a packet of the family; tunneled (a
// constant: each program has its own copy) says the packet is one a peer
// tunnelled here, decapsulated: it may only start a flow to a frontend
// of NP_SCOPE_TUNNEL, or go on in one of the flows such packets started,
// and what it may not is dropped (tunnel_lost).
static __always_inline int F(ingress_at)(struct __sk_buff *skb, const int tunneled)
{
	struct F(pkt) pk = {}, *p = &pk;
	if (!F(parse)(skb, p))
		return NP_UNPARSED;
	__u64 now = bpf_ktime_get_ns();
	struct F(ct_val) *v = bpf_map_lookup_elem(&F(np_ct), &p->k);
	// A masqueraded flow's reply whose entry np_ct evicted: the port is
	// still the flow's (np_snat), and its reply entry is made again.
	if (!v && !tunneled && snat_range(p->k.dport))
		v = F(rebuilt_reply)(&p->k, now);
	// A decapsulated packet is never the stack's nor a flow's that
	// arrived here directly: one that did would be sent on from here
	// (to a third node, back into a tunnel).
	if (v && tunneled && !(v->flags & CT_F_TUNNELED))
		v = NULL;
	if (v && v->at != CT_AT_EGRESS) {
		if (F(live)(&p->k, v, now))
			return F(apply)(skb, p, v, now);
		bpf_map_delete_elem(&F(np_ct), &p->k);
	}
	// Only a SYN starts a TCP flow here. A later packet without an entry
	// belongs to a connection the kernel's conntrack may hold (one the
	// nftables rules translated before these programs were attached, or
	// one whose entry was evicted): the stack decides, as it would have.
	if (p->k.proto == IPPROTO_TCP && (p->tcp_flags & (TCP_SYN | TCP_ACK)) != TCP_SYN)
		return tunneled ? F(tunnel_lost)() : TC_ACT_OK;
	struct np_val *sv;
	if (tunneled) {
		sv = F(tunnelled_frontend)(&p->k);
	} else {
		struct F(np_key) k = { .addr = p->k.dst, .port = p->k.dport, .proto = p->k.proto };
		sv = bpf_map_lookup_elem(&F(np_services), &k);
	}
	if (!sv)
		return tunneled ? F(tunnel_lost)() : TC_ACT_OK;
	struct np_val cp = *sv;
	int rc = F(new_flow)(skb, p, &cp, now, tunneled);
	if (rc != NP_TUNNELLED)
		return rc;
	if (last_hop(p->ttl, CT_AT_TUNNEL))
		return F(time_exceeded)(skb);
	v = bpf_map_lookup_elem(&F(np_ct), &p->k);
	return v ? F(tunnel_out)(skb, v, p->ttl) : TC_ACT_SHOT;
}

// ingress is np_ingress for a packet of the family. Each family's is a
// function of its own (a BPF-to-BPF call), so that their stack frames are
// not added up in np_ingress's.
static FLOW_FN int F(ingress)(struct __sk_buff *skb)
{
	return F(ingress_at)(skb, 0);
}

// egress is np_egress for a packet of the family, a function of its own
// as ingress.
static FLOW_FN int F(egress)(struct __sk_buff *skb)
{
	struct F(pkt) pk = {}, *p = &pk;
	if (!F(parse)(skb, p))
		return NP_UNPARSED;
	struct F(ct_val) *v = bpf_map_lookup_elem(&F(np_ct), &p->k);
	if (!v || v->at != CT_AT_EGRESS)
		return TC_ACT_OK;
	__u64 now = bpf_ktime_get_ns();
	if (!F(live)(&p->k, v, now))
		return TC_ACT_OK;
	// The SYN-ACK of a flow a peer tunnelled here: the client's segments
	// will come through the tunnel.
	if (v->flags & CT_F_TUNNELED && p->tcp_flags & TCP_SYN)
		F(clamp_mss)(skb, p);
	return F(apply)(skb, p, v, now);
}
