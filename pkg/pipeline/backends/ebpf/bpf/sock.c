// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Connect-time service load balancing: the cgroup socket-address hooks
// rewrite a socket's destination from a Service frontend to one endpoint
// before the kernel routes anything, and translate the endpoint back to the
// frontend where the application can see it (UDP recvmsg, getpeername).
// The programs decide nothing: the maps, written by svcproxy from the
// desired State, say what every frontend does.

#include <linux/bpf.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>


#define ECONNREFUSED 111
#define ETIMEDOUT 110

// Service record flags.
#define SVC_F_DROP 1 // no endpoint: drop, not reject

#define NSEC_PER_SEC 1000000000ULL

// Every address is 16 bytes, IPv4 as ::ffff:a.b.c.d, so that both families
// share one layout (each family loads its own maps). Ports are in network
// byte order, as the hooks see them.
struct svc_key {
	__u32 addr[4];
	__u16 port;
	__u8 proto;
	__u8 pad;
};

// target is where one class of sockets addressing a frontend goes: count
// slots of endpoint group id, or, with count 0, a refusal (flags say how).
struct target {
	__u64 id;
	__u32 count;
	__u32 flags;
};

// svc_val is what one frontend does, for sockets of the node (its own
// network namespace) and of pods (any other), whose routes desired may
// decide apart. A frontend with port and protocol 0 is a cluster IP's:
// what a socket addressing a port the Service lacks gets.
struct svc_val {
	struct target pod;
	struct target node;
	__u32 affinity; // ClientIP affinity timeout in seconds, 0 for none
	__u32 pad;
};

// The network namespace cookie of the node's own sockets, set at load.
volatile const __u64 host_netns = 0;

struct be_key {
	__u64 id;
	__u32 slot;
	__u32 pad;
};

struct be_val {
	__u32 addr[4];
	__u16 port;
	__u16 pad;
};

// rev_key names a translated flow by socket and endpoint, so that what the
// socket receives from the endpoint can be shown as coming from the frontend.
struct rev_key {
	__u64 cookie;
	__u32 addr[4];
	__u16 port;
	__u16 pad[3];
};

// The client of ClientIP affinity is the network namespace: the hooks run
// before the socket has a source address.
struct aff_key {
	__u64 netns;
	__u64 id;
};

struct aff_val {
	__u64 seen;
	__u32 slot;
	struct be_val be;
};

// The sizes are set by svcproxy at load time: the hash maps from the State,
// the LRU maps to fixed capacities.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct svc_key);
	__type(value, struct svc_val);
} services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct be_key);
	__type(value, struct be_val);
} backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct rev_key);
	__type(value, struct be_val);
} revnat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct aff_key);
	__type(value, struct aff_val);
} affinity SEC(".maps");

static __always_inline int same_be(const struct be_val *a, const struct be_val *b)
{
	return a->addr[0] == b->addr[0] && a->addr[1] == b->addr[1] && a->addr[2] == b->addr[2] &&
	       a->addr[3] == b->addr[3] && a->port == b->port;
}

// pick chooses the endpoint of a target with endpoints: the one the
// client's affinity names while it lasts and still holds its slot, else a
// random slot.
static __always_inline struct be_val *pick(const struct target *tg, __u32 timeout, __u64 netns)
{
	struct aff_key ak = { .netns = netns, .id = tg->id };
	struct be_key bk = { .id = tg->id };
	struct be_val *be;
	__u64 now = 0;

	if (timeout) {
		now = bpf_ktime_get_ns();
		struct aff_val *av = bpf_map_lookup_elem(&affinity, &ak);
		if (av && now - av->seen < (__u64)timeout * NSEC_PER_SEC && av->slot < tg->count) {
			bk.slot = av->slot;
			be = bpf_map_lookup_elem(&backends, &bk);
			if (be && same_be(be, &av->be)) {
				av->seen = now;
				return be;
			}
		}
	}
	bk.slot = bpf_get_prandom_u32() % tg->count;
	be = bpf_map_lookup_elem(&backends, &bk);
	if (be && timeout) {
		struct aff_val nv = { .seen = now, .slot = bk.slot, .be = *be };
		bpf_map_update_elem(&affinity, &ak, &nv, BPF_ANY);
	}
	return be;
}

// set_dst writes a destination into the context. v6 is a constant in every
// caller: the verifier refuses an IPv4 hook's access to user_ip6, even in a
// branch it would not take.
static __always_inline void set_dst(struct bpf_sock_addr *ctx, const struct be_val *to, const int v6)
{
	if (v6) {
		ctx->user_ip6[0] = to->addr[0];
		ctx->user_ip6[1] = to->addr[1];
		ctx->user_ip6[2] = to->addr[2];
		ctx->user_ip6[3] = to->addr[3];
	} else {
		ctx->user_ip4 = to->addr[3];
	}
	ctx->user_port = to->port;
}

// record returns frontend k's service record: its own, else, for a
// cluster IP, the record of the ports the Service lacks.
static __always_inline struct svc_val *record(const struct svc_key *k)
{
	struct svc_val *p = bpf_map_lookup_elem(&services, k);
	if (!p) {
		struct svc_key any = *k;
		any.port = 0;
		any.proto = 0;
		p = bpf_map_lookup_elem(&services, &any);
	}
	return p;
}

// xlate rewrites the destination of a socket addressing frontend k.
static __always_inline int xlate(struct bpf_sock_addr *ctx, struct svc_key *k, const int v6)
{
	__u64 netns = bpf_get_netns_cookie(ctx);
	struct be_val *be = NULL;
	// svcproxy writes a record after the slots it counts and deletes a
	// slot after no record counts it, so a slot missing from a record's
	// copy means the record changed since the copy: the second pass
	// reads the record that replaced it.
	for (int pass = 0; pass < 2 && !be; pass++) {
		struct svc_val *p = record(k);
		if (!p)
			return 1;
		// One consistent copy: svcproxy may rewrite the record meanwhile.
		struct target tg = netns == host_netns ? p->node : p->pod;
		__u32 timeout = p->affinity;
		if (tg.count == 0) {
			// A hook cannot make connect wait: a dropped connection
			// fails as a dropped SYN eventually would.
			bpf_set_retval(tg.flags & SVC_F_DROP ? -ETIMEDOUT : -ECONNREFUSED);
			return 0;
		}
		be = pick(&tg, timeout, netns);
	}
	if (!be)
		return 1;
	struct rev_key rk = { .cookie = bpf_get_socket_cookie(ctx), .port = be->port };
	struct be_val fe = { .port = k->port };
	for (int i = 0; i < 4; i++) {
		rk.addr[i] = be->addr[i];
		fe.addr[i] = k->addr[i];
	}
	bpf_map_update_elem(&revnat, &rk, &fe, BPF_ANY);
	set_dst(ctx, be, v6);
	return 1;
}

// unxlate shows an endpoint's address as the frontend the socket chose.
static __always_inline int unxlate(struct bpf_sock_addr *ctx, struct rev_key *rk, const int v6)
{
	rk->cookie = bpf_get_socket_cookie(ctx);
	struct be_val *fe = bpf_map_lookup_elem(&revnat, rk);
	if (fe)
		set_dst(ctx, fe, v6);
	return 1;
}

#define V4MAPPED bpf_htonl(0xffff)

static __always_inline int xlate4(struct bpf_sock_addr *ctx)
{
	struct svc_key k = {
		.addr = { 0, 0, V4MAPPED, ctx->user_ip4 },
		.port = (__u16)ctx->user_port,
		.proto = (__u8)ctx->protocol,
	};
	return xlate(ctx, &k, 0);
}

static __always_inline int xlate6(struct bpf_sock_addr *ctx)
{
	struct svc_key k = {
		.addr = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3] },
		.port = (__u16)ctx->user_port,
		.proto = (__u8)ctx->protocol,
	};
	return xlate(ctx, &k, 1);
}

static __always_inline int unxlate4(struct bpf_sock_addr *ctx)
{
	struct rev_key rk = {
		.addr = { 0, 0, V4MAPPED, ctx->user_ip4 },
		.port = (__u16)ctx->user_port,
	};
	return unxlate(ctx, &rk, 0);
}

static __always_inline int unxlate6(struct bpf_sock_addr *ctx)
{
	struct rev_key rk = {
		.addr = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3] },
		.port = (__u16)ctx->user_port,
	};
	return unxlate(ctx, &rk, 1);
}

SEC("cgroup/connect4")
int connect4(struct bpf_sock_addr *ctx) { return xlate4(ctx); }

SEC("cgroup/sendmsg4")
int sendmsg4(struct bpf_sock_addr *ctx) { return xlate4(ctx); }

SEC("cgroup/recvmsg4")
int recvmsg4(struct bpf_sock_addr *ctx) { return unxlate4(ctx); }

SEC("cgroup/getpeername4")
int getpeername4(struct bpf_sock_addr *ctx) { return unxlate4(ctx); }

SEC("cgroup/connect6")
int connect6(struct bpf_sock_addr *ctx) { return xlate6(ctx); }

// An AF_INET6 socket may address an IPv4 destination as ::ffff:a.b.c.d (a
// dual-stack application reaching an IPv4 Service). connect and
// getpeername run the IPv6 hooks for it, and recvmsg shows the source of
// an IPv4 datagram mapped; an unconnected sendmsg runs the IPv4 hook (the
// kernel unmaps the address first). The IPv4 family attaches these three
// beside the IPv6 family's, over its own maps, whose keys are mapped
// already: the endpoint is set mapped too, and each family's programs
// pass what the other's maps hold.
static __always_inline int v4mapped(struct bpf_sock_addr *ctx)
{
	return ctx->user_ip6[0] == 0 && ctx->user_ip6[1] == 0 && ctx->user_ip6[2] == V4MAPPED;
}

SEC("cgroup/connect6")
int connect4in6(struct bpf_sock_addr *ctx) { return v4mapped(ctx) ? xlate6(ctx) : 1; }

SEC("cgroup/sendmsg6")
int sendmsg6(struct bpf_sock_addr *ctx) { return xlate6(ctx); }

SEC("cgroup/recvmsg6")
int recvmsg6(struct bpf_sock_addr *ctx) { return unxlate6(ctx); }

SEC("cgroup/recvmsg6")
int recvmsg4in6(struct bpf_sock_addr *ctx) { return v4mapped(ctx) ? unxlate6(ctx) : 1; }

SEC("cgroup/getpeername6")
int getpeername6(struct bpf_sock_addr *ctx) { return unxlate6(ctx); }

SEC("cgroup/getpeername6")
int getpeername4in6(struct bpf_sock_addr *ctx) { return v4mapped(ctx) ? unxlate6(ctx) : 1; }

// The socket iterator (kernel 6.5 or later for bpf_sock_destroy) lists the
// UDP sockets of one network namespace that a hook translated, and destroys
// those svcproxy names: what the conntrack cleanup does for flows DNATed to
// an endpoint that went away, for sockets the hooks sent there at connect.
// The kernel types are declared only as far as read here; their layout
// comes from the running kernel's BTF (CO-RE).

#define AF_INET 2
#define AF_INET6 10

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct seq_file;
struct udp_sock;

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

// doomed holds the cookies of the sockets to destroy, written by svcproxy
// for one run of the iterator and emptied after it; the iterator stays
// loaded between runs, so the map allocates only what a run names.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u8);
} doomed SEC(".maps");

// sock_rec is what the iterator writes per translated socket; addresses
// and ports as in the maps.
struct sock_rec {
	__u64 cookie;
	__u32 local[4];
	__u32 peer[4]; // the endpoint
	__u32 front[4]; // the frontend the socket addressed
	__u16 lport;
	__u16 pport;
	__u16 fport;
	__u8 destroyed;
	__u8 pad;
};

SEC("iter/udp")
int udp_sockets(struct bpf_iter__udp *ctx)
{
	struct sock *sk = (struct sock *)ctx->udp_sk;
	struct sock_rec r = {};
	struct rev_key rk = {};

	if (!sk)
		return 0;
	if (sk->__sk_common.skc_family == AF_INET) {
		r.local[2] = r.peer[2] = V4MAPPED;
		r.local[3] = sk->__sk_common.skc_rcv_saddr;
		r.peer[3] = sk->__sk_common.skc_daddr;
	} else if (sk->__sk_common.skc_family == AF_INET6) {
		for (int i = 0; i < 4; i++) {
			r.local[i] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[i];
			r.peer[i] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[i];
		}
	} else {
		return 0;
	}
	r.lport = bpf_htons(sk->__sk_common.skc_num);
	r.pport = sk->__sk_common.skc_dport;
	// Only a socket the hooks translated has a record under its cookie
	// and the endpoint it is connected to.
	r.cookie = rk.cookie = bpf_get_socket_cookie(sk);
	rk.port = r.pport;
	for (int i = 0; i < 4; i++)
		rk.addr[i] = r.peer[i];
	struct be_val *fe = bpf_map_lookup_elem(&revnat, &rk);
	if (!fe)
		return 0;
	for (int i = 0; i < 4; i++)
		r.front[i] = fe->addr[i];
	r.fport = fe->port;
	if (bpf_map_lookup_elem(&doomed, &r.cookie))
		r.destroyed = bpf_sock_destroy((struct sock_common *)sk) == 0;
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

char _license[] SEC("license") = "Dual BSD/GPL";
