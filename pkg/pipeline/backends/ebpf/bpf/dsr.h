// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Direct server return's IPv4 maps and counters, included by nodeport.c
// with its other maps (the programs: tunnel.h, tunnel6.h).

#ifndef SVCPROXY_DSR_H
#define SVCPROXY_DSR_H

// Direct server return (DSR). np_tunnels maps an endpoint on a peer node
// to that node's address, the outer destination of the tunnel a flow to it
// takes from here (sized as np_backends); np_peers holds the addresses of
// the nodes that decapsulate, the only outer sources a tunnelled packet is
// taken from. svcproxy writes both from the State.
struct np_tunnel {
	__be32 node;
	__u32 flags; // none yet: zero
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __be32);
	__type(value, struct np_tunnel);
} np_tunnels SEC(".maps");

#define NP_MAX_PEERS 16384

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, NP_MAX_PEERS);
	__type(key, __be32);
	__type(value, __u32);
} np_peers SEC(".maps");

// np_stats_dsr counts what DSR drops, per family: NP_STAT_DSR_* for IPv4,
// the same plus NP_STATS_DSR for IPv6. (np_stats cannot grow: its
// max_entries is fixed under its pin.)
#define NP_STAT_DSR_TOO_BIG 0 // a packet the tunnel's header would make too big, not answerable
#define NP_STAT_DSR_NO_FLOW 1 // a decapsulated packet no flow or frontend here takes
#define NP_STATS_DSR 2
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * NP_STATS_DSR);
	__type(key, __u32);
	__type(value, __u64);
} np_stats_dsr SEC(".maps");

// np_progs_tun holds the programs a decapsulated packet goes on in
// (NP_PROG_TUN*), filled and kept pinned as np_progs6 is.
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} np_progs_tun SEC(".maps");

#define NP_PROG_TUN 0
#define NP_PROG_TUN6 1

#endif
