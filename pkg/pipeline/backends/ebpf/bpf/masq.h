// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Included by nodeport.c once per IP family (as ct.h), after the
// conntrack table and its helpers: the masquerade port search for flows
// source-NATed to the node, the kernel conntrack lookup it and a drain's
// replies use, and the drop counters (both families').

#ifndef SVCPROXY_MASQ_H
#define SVCPROXY_MASQ_H

// The masquerade ports: those the kernel's masquerade takes for a source
// port above 1023 (1024-65535), less Linux's default ephemeral range
// (32768-60999). The kernel's conntrack steers the node's own connections
// clear of masqueraded flows; this table's flows it does not see, so they
// keep out of the ports those connections take.
#define SNAT_LOW 1024
#define SNAT_LOW_SPAN (32768 - SNAT_LOW)
#define SNAT_HIGH 61000
#define SNAT_SPAN (SNAT_LOW_SPAN + 65536 - SNAT_HIGH)
// The search, as the kernel's: up to 128 consecutive ports from a random
// start, then rounds of half as many from a new random start, down to 16;
// a full table costs at most 240 lookups per new flow.
#define SNAT_ROUND1 128
#define SNAT_ROUND2 (SNAT_ROUND1 + SNAT_ROUND1 / 2)
#define SNAT_ROUND3 (SNAT_ROUND2 + SNAT_ROUND1 / 4)
#define SNAT_TRIES (SNAT_ROUND3 + SNAT_ROUND1 / 8)

// snat_range says whether port (network order) is a masquerade port.
static __always_inline int snat_range(__be16 port)
{
	__u16 n = bpf_ntohs(port);
	return n >= SNAT_LOW && (n < SNAT_LOW + SNAT_LOW_SPAN || n >= SNAT_HIGH);
}

// A reservation younger than this is its flow's whatever np_ct says: the
// flow that made it writes its forward entry right after.
#define SNAT_GRACE_NS NSEC_PER_SEC

// np_stats counts what the programs drop by themselves (NP_STAT_*) in
// IPv4 flows, np_stats6 in IPv6 flows, per CPU; svcproxy sums the CPUs'
// counts.
#define NP_STAT_NO_SNAT_PORT 0 // new flows: no masquerade port free
#define NP_STAT_REPLY_LOST 1 // flows that lost their reply tuple to another (svcproxy counts them)
#define NP_STATS 2
struct np_stats_map {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NP_STATS);
	__type(key, __u32);
	__type(value, __u64);
};
struct np_stats_map np_stats SEC(".maps");
struct np_stats_map np_stats6 SEC(".maps");

static __always_inline void np_count(void *stats, __u32 stat)
{
	__u64 *n = bpf_map_lookup_elem(stats, &stat);
	if (n)
		*n += 1;
}
#endif

// in_kernel_ct says whether the kernel's conntrack holds a flow with k as
// either direction. A function of its own, so that the tuple's stack is
// not added to the flow logic's.
static __noinline int F(in_kernel_ct)(struct __sk_buff *skb, const struct F(ct_key) *k)
{
	if (!np_kernel_ct)
		return 0;
	struct bpf_sock_tuple t = {};
	__u32 size = F(sock_tuple)(k, &t);
	struct ct_lookup_opts o = { .netns_id = BPF_F_CURRENT_NETNS, .l4proto = k->proto };
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, &t, size, &o, sizeof(o));
	if (!ct)
		return 0;
	bpf_ct_release(ct);
	return 1;
}

struct F(snat_search) {
	struct F(ct_val) fwd; // its sport is the port tried, the one taken at the end
	struct F(ct_val) rev;
	struct __sk_buff *skb; // the flow's first packet, for in_kernel_ct
	__u64 now;
	__u32 off;
	__u8 proto;
	__u8 found;
};

// reserved says whether r, np_snat's reservation of reply tuple rk, still
// holds it for its owner: the owner's forward entry lives and masquerades
// to rk's reverse (a client's new flow from the same port has a forward
// entry of its own port), or r is too recent for that entry to be written.
static __always_inline int F(reserved)(const struct F(ct_key) *rk, const struct F(snat_val) *r, __u64 now)
{
	if (elapsed(now, r->since) < SNAT_GRACE_NS)
		return 1;
	struct F(ct_val) *f = bpf_map_lookup_elem(&F(np_ct), &r->owner);
	return f && !f->reply && f->at == CT_AT_INGRESS_FWD && F(rewrites_to)(f, rk) && F(live)(&r->owner, f, now);
}

// own_by makes r name the flow whose reply direction's entry is v: its
// forward key is that entry's reverse (written field by field: a whole
// key built apart would take the stack of the port search's frames).
static __always_inline void F(own_by)(struct F(snat_val) *r, const struct F(ct_val) *v, __u8 proto)
{
	r->owner.src = v->dst;
	r->owner.dst = v->src;
	r->owner.sport = v->dport;
	r->owner.dport = v->sport;
	r->owner.proto = proto;
}

// claim reserves reply tuple rk for s's flow and records the reply
// direction there. A reservation that no longer holds (reserved) is taken
// over. Of two flows claiming rk at once, the one whose reply entry np_ct
// takes first (BPF_NOEXIST) has it: the other leaves np_snat naming that
// flow, even when its own claim removed the first one's reservation.
static __noinline int F(claim)(struct F(snat_search) *s, const struct F(ct_key) *rk, int stale)
{
	struct F(snat_val) own = { .since = s->now };
	F(own_by)(&own, &s->rev, rk->proto);
	if (stale)
		bpf_map_delete_elem(&F(np_snat), rk);
	if (bpf_map_update_elem(&F(np_snat), rk, &own, BPF_NOEXIST))
		return 0; // another flow's, or np_snat is full (a sweep frees it)
	if (!bpf_map_update_elem(&F(np_ct), rk, &s->rev, BPF_NOEXIST))
		return 1;
	struct F(ct_val) *other = bpf_map_lookup_elem(&F(np_ct), rk);
	if (!other) {
		bpf_map_delete_elem(&F(np_snat), rk);
		return 0;
	}
	F(own_by)(&own, other, rk->proto);
	bpf_map_update_elem(&F(np_snat), rk, &own, BPF_ANY);
	return 0;
}

// snat_try (bpf_loop's callback) tries the search's i-th port: free when
// no flow's reservation holds the reply tuple (endpoint, masquerade
// address and port; np_snat), no live entry of np_ct does (a flow an
// older svcproxy made, before np_snat) and no flow of the kernel's
// conntrack does (a connection the rules masqueraded before the programs
// took over, still open); an expired entry there is deleted, an evicted
// one is gone.
static long F(snat_try)(__u32 i, void *data)
{
	struct F(snat_search) *s = data;
	if (i == SNAT_ROUND1 || i == SNAT_ROUND2 || i == SNAT_ROUND3)
		s->off = bpf_get_prandom_u32() - i;
	__u32 n = (s->off + i) % SNAT_SPAN;
	s->fwd.sport = bpf_htons(n < SNAT_LOW_SPAN ? SNAT_LOW + n : SNAT_HIGH + n - SNAT_LOW_SPAN);
	struct F(ct_key) rk = F(reverse)(&s->fwd, s->proto);
	struct F(snat_val) *r = bpf_map_lookup_elem(&F(np_snat), &rk);
	if (r && F(reserved)(&rk, r, s->now))
		return 0;
	struct F(ct_val) *old = bpf_map_lookup_elem(&F(np_ct), &rk);
	if (old) {
		if (F(live)(&rk, old, s->now))
			return 0;
		bpf_map_delete_elem(&F(np_ct), &rk);
	}
	if (F(in_kernel_ct)(s->skb, &rk) || !F(claim)(s, &rk, r != NULL))
		return 0;
	s->found = 1;
	return 1;
}

// snat_port finds a source port of s->fwd's address from which nothing
// else talks to the endpoint, reserves it and records the reply direction
// (s->rev) there. A flow that finds none is counted (and dropped by the
// caller): given a port in use, its replies would go to another client.
static __always_inline int F(snat_port)(struct F(snat_search) *s)
{
	s->off = bpf_get_prandom_u32();
	bpf_loop(SNAT_TRIES, F(snat_try), s, 0);
	if (!s->found) {
		np_count(&F(np_stats), NP_STAT_NO_SNAT_PORT);
		return 0;
	}
	return 1;
}

// rebuilt_reply is the reply entry of a masqueraded flow that np_ct
// evicted while keeping its forward entry, made again from that entry for
// k, a packet np_ct does not know to a masquerade port (the caller checks
// the range, so that other packets make no call): NULL unless k goes to
// the masquerade address and port of a reservation whose owner's forward
// entry is unexpired and masquerades to k's reverse. The reservation kept
// the port the flow's, so its replies reach its client again.
static __noinline struct F(ct_val) *F(rebuilt_reply)(const struct F(ct_key) *k, __u64 now)
{
	__u32 zero = 0;
	struct F(np_cfg) *cfg = bpf_map_lookup_elem(&F(np_config), &zero);
	if (!cfg || !addr_eq(cfg->snat_addr, k->dst))
		return NULL;
	struct F(snat_val) *r = bpf_map_lookup_elem(&F(np_snat), k);
	if (!r)
		return NULL;
	struct F(ct_key) fk = r->owner;
	struct F(ct_val) *f = bpf_map_lookup_elem(&F(np_ct), &fk);
	if (!f || f->reply || f->at != CT_AT_INGRESS_FWD || !F(rewrites_to)(f, k) || F(expired)(f, k->proto, now))
		return NULL;
	struct F(ct_val) rev = { .src = fk.dst, .dst = fk.src, .sport = fk.dport, .dport = fk.sport,
				 .at = CT_AT_INGRESS_FWD, .state = f->state, .reply = 1, .seen = now };
	bpf_map_update_elem(&F(np_ct), k, &rev, BPF_ANY);
	return bpf_map_lookup_elem(&F(np_ct), k);
}
