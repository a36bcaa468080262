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

// np_stats counts what the programs drop by themselves (NP_STAT_*) in
// IPv4 flows, np_stats6 in IPv6 flows, per CPU; svcproxy sums the CPUs'
// counts.
#define NP_STAT_NO_SNAT_PORT 0 // new flows: no masquerade port free
#define NP_STAT_REPLY_LOST 1 // packets of a flow whose reply tuple another took
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

// snat_try (bpf_loop's callback) tries the search's i-th port: free when
// no live entry holds the reply tuple (endpoint, masquerade address and
// port) and no flow of the kernel's conntrack does (a connection the
// rules masqueraded before the programs took over, still open); an
// expired entry there is deleted, an evicted one is gone. The reply
// direction is recorded only if no other CPU recorded one there since
// (BPF_NOEXIST), so two flows never share it.
static long F(snat_try)(__u32 i, void *data)
{
	struct F(snat_search) *s = data;
	if (i == SNAT_ROUND1 || i == SNAT_ROUND2 || i == SNAT_ROUND3)
		s->off = bpf_get_prandom_u32() - i;
	__u32 n = (s->off + i) % SNAT_SPAN;
	s->fwd.sport = bpf_htons(n < SNAT_LOW_SPAN ? SNAT_LOW + n : SNAT_HIGH + n - SNAT_LOW_SPAN);
	struct F(ct_key) rk = F(reverse)(&s->fwd, s->proto);
	struct F(ct_val) *old = bpf_map_lookup_elem(&F(np_ct), &rk);
	if (old) {
		if (F(live)(&rk, old, s->now))
			return 0;
		bpf_map_delete_elem(&F(np_ct), &rk);
	}
	if (F(in_kernel_ct)(s->skb, &rk))
		return 0;
	if (bpf_map_update_elem(&F(np_ct), &rk, &s->rev, BPF_NOEXIST))
		return 0;
	s->found = 1;
	return 1;
}

// snat_port finds a source port of s->fwd's address from which nothing
// else talks to the endpoint, and records the reply direction (s->rev)
// there. A flow that finds none is counted (and dropped by the caller):
// given a port in use, its replies would go to another client.
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

// holds_reply says whether v, the entry of k, still holds its flow's
// reply tuple where it masquerades (for any other entry, yes). The LRU
// table may evict one direction of a flow and keep the other, and a new
// flow may then take the port: this flow's packets would reach the
// endpoint as that flow's. A reply tuple found free is claimed back.
static __always_inline int F(holds_reply)(const struct F(ct_key) *k, const struct F(ct_val) *v, __u64 now)
{
	if (v->reply || v->at != CT_AT_INGRESS_FWD || addr_eq(v->src, k->src))
		return 1;
	struct F(ct_key) rk = F(reverse)(v, k->proto);
	struct F(ct_val) *r = bpf_map_lookup_elem(&F(np_ct), &rk);
	if (r)
		return F(rewrites_to)(r, k);
	struct F(ct_val) rev = { .src = k->dst, .dst = k->src, .sport = k->dport, .dport = k->sport,
				 .at = CT_AT_INGRESS_FWD, .state = v->state, .reply = 1, .seen = now };
	return bpf_map_update_elem(&F(np_ct), &rk, &rev, BPF_NOEXIST) == 0;
}
