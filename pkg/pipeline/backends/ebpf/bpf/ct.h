// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Included by nodeport.c once per IP family, after its maps and packet
// parsing: the programs' conntrack table, one entry per direction of a
// flow, expired as the kernel's conntrack would. F(name) is name for
// IPv4 and name6 for IPv6 (types, maps and functions alike); addr_eq
// compares two addresses of the family.

#ifndef SVCPROXY_CT_H
#define SVCPROXY_CT_H
// The timeouts, in seconds, as the kernel's conntrack would expire the
// flow, its states folded into four: TCP before its first reply
// (SYN_RECV), established (kube-proxy's tcpEstablishedTimeout default),
// after a FIN (FIN_WAIT, TIME_WAIT), after a RST (CLOSE); UDP before a
// reply and once replied (nf_conntrack_udp_timeout and its stream value).
static __always_inline __u64 ct_timeout(__u8 proto, __u8 state)
{
	if (proto == IPPROTO_TCP) {
		switch (state) {
		case CT_ESTABLISHED:
			return 86400;
		case CT_CLOSING:
			return 120;
		case CT_CLOSED:
			return 10;
		}
		return 60;
	}
	return state == CT_ESTABLISHED ? 120 : 30;
}
#endif

static __always_inline struct F(ct_key) F(reverse)(const struct F(ct_val) *v, __u8 proto)
{
	struct F(ct_key) r = { .src = v->dst, .dst = v->src, .sport = v->dport, .dport = v->sport, .proto = proto };
	return r;
}

// track advances the flow's state with a packet of direction e (reply:
// the packet answers the flow's first direction) and refreshes both
// directions' entries. A flow tunnelled to a peer (CT_AT_TUNNEL) has no
// other direction here, its replies going from the peer to the client: a
// client's TCP packet without SYN (the handshake's ACK) tells it is
// established, as a reply would, else the connection would expire as an
// unanswered one.
static __always_inline void F(track)(struct F(ct_val) *e, const struct F(pkt) *p, int reply, __u64 now)
{
	__u8 st = e->state;
	int tunnel = e->at == CT_AT_TUNNEL;
	if (p->tcp_flags & TCP_RST)
		st = CT_CLOSED;
	else if (p->tcp_flags & TCP_FIN && st != CT_CLOSED)
		st = CT_CLOSING;
	else if (st == CT_NEW && (reply || (tunnel && p->k.proto == IPPROTO_TCP && !(p->tcp_flags & TCP_SYN))))
		st = CT_ESTABLISHED;
	e->seen = now;
	if (st == e->state)
		return;
	e->state = st;
	if (tunnel)
		return;
	struct F(ct_key) other = F(reverse)(e, p->k.proto);
	struct F(ct_val) *o = bpf_map_lookup_elem(&F(np_ct), &other);
	if (o) {
		o->state = st;
		o->seen = now;
	}
}

static __always_inline int F(expired)(const struct F(ct_val) *v, __u8 proto, __u64 now)
{
	return elapsed(now, v->seen) > ct_timeout(proto, v->state) * NSEC_PER_SEC;
}

// rewrites_to says whether o, an entry of the table, rewrites a packet
// back to k's reverse: o is the other direction of k's flow.
static __always_inline int F(rewrites_to)(const struct F(ct_val) *o, const struct F(ct_key) *k)
{
	return addr_eq(o->src, k->dst) && addr_eq(o->dst, k->src) && o->sport == k->dport && o->dport == k->sport;
}

// live says whether v, the entry of k, is a live flow's. As the kernel's
// conntrack keeps a flow while packets go either way, an entry past its
// timeout still lives while the flow's other direction does (a client
// streaming UDP to an endpoint that does not answer refreshes only its
// own direction).
static __always_inline int F(live)(const struct F(ct_key) *k, const struct F(ct_val) *v, __u64 now)
{
	if (!F(expired)(v, k->proto, now))
		return 1;
	struct F(ct_key) ok = F(reverse)(v, k->proto);
	struct F(ct_val) *o = bpf_map_lookup_elem(&F(np_ct), &ok);
	// The other entry must be this flow's: it rewrites back to k.
	return o && F(rewrites_to)(o, k) && !F(expired)(o, k->proto, now);
}
