// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Answers the tc programs send in the place of a packet, as REJECT does in
// the other modes (a TCP RST, an ICMP port unreachable), or as the
// kernel's forwarding does for a packet without a hop left (ICMP time
// exceeded). The packet is rewritten into the answer and sent back out of
// the interface it came in on. Its IPv4 header has no options (the caller
// checked).

#ifndef SVCPROXY_REPLY_H
#define SVCPROXY_REPLY_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ICMP_DEST_UNREACH 3
#define ICMP_PORT_UNREACH 3
#define ICMP_FRAG_NEEDED 4
#define ICMP_TIME_EXCEEDED 11

// The ICMP header (linux/icmp.h pulls in libc's socket headers).
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__u32 unused;
};

// fold turns a 32-bit one's complement sum into a checksum.
static __always_inline __u16 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

static __always_inline void ip_header(struct iphdr *ip, __be32 src, __be32 dst, __u8 proto, __u16 len)
{
	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = bpf_htons(len);
	ip->ttl = 64;
	ip->protocol = proto;
	ip->saddr = src;
	ip->daddr = dst;
	ip->check = fold(bpf_csum_diff(NULL, 0, (__be32 *)ip, sizeof(*ip), 0));
}

// answer replaces the packet with the len bytes of reply (an IPv4 packet)
// and sends it back out of the interface it came in on.
static __always_inline int answer(struct __sk_buff *skb, void *reply, __u32 len)
{
	struct ethhdr eth;
	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)))
		return TC_ACT_SHOT;
	unsigned char mac[ETH_ALEN];
	__builtin_memcpy(mac, eth.h_source, ETH_ALEN);
	__builtin_memcpy(eth.h_source, eth.h_dest, ETH_ALEN);
	__builtin_memcpy(eth.h_dest, mac, ETH_ALEN);
	if (bpf_skb_change_tail(skb, sizeof(eth) + len, 0))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) ||
	    bpf_skb_store_bytes(skb, sizeof(eth), reply, len, 0))
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

struct rst_pkt {
	struct iphdr ip;
	struct tcphdr tcp;
};

struct pseudo {
	__be32 src;
	__be32 dst;
	__u8 zero;
	__u8 proto;
	__be16 len;
	struct tcphdr tcp;
};

// reset answers a TCP packet (its header at l4) with a RST, as a refused
// connection.
static __always_inline int reset(struct __sk_buff *skb, __u32 l4)
{
	struct iphdr in;
	struct tcphdr th;
	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &in, sizeof(in)) ||
	    bpf_skb_load_bytes(skb, l4, &th, sizeof(th)))
		return TC_ACT_SHOT;
	struct pseudo ps = { .src = in.daddr, .dst = in.saddr, .proto = IPPROTO_TCP, .len = bpf_htons(sizeof(struct tcphdr)) };
	ps.tcp.source = th.dest;
	ps.tcp.dest = th.source;
	ps.tcp.doff = 5;
	ps.tcp.rst = 1;
	if (th.ack) {
		ps.tcp.seq = th.ack_seq;
	} else {
		__u32 seglen = bpf_ntohs(in.tot_len) - sizeof(in) - th.doff * 4 + th.syn + th.fin;
		ps.tcp.ack = 1;
		ps.tcp.ack_seq = bpf_htonl(bpf_ntohl(th.seq) + seglen);
	}
	ps.tcp.check = fold(bpf_csum_diff(NULL, 0, (__be32 *)&ps, sizeof(ps), 0));
	struct rst_pkt r = { .tcp = ps.tcp };
	ip_header(&r.ip, in.daddr, in.saddr, IPPROTO_TCP, sizeof(r));
	return answer(skb, &r, sizeof(r));
}

struct unreach_pkt {
	struct iphdr ip;
	struct icmphdr icmp;
	struct iphdr orig;
	__u8 l4[8];
};

// icmp_answer answers a TCP or UDP packet with an ICMP error of type and
// code, the header's last word rest, quoting its IPv4 header and the
// first 8 bytes of its L4 header.
static __always_inline int icmp_answer(struct __sk_buff *skb, __u8 type, __u8 code, __be32 rest)
{
	struct unreach_pkt r = { .icmp.unused = rest };
	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &r.orig, sizeof(r.orig) + sizeof(r.l4)))
		return TC_ACT_SHOT;
	r.icmp.type = type;
	r.icmp.code = code;
	r.icmp.checksum = fold(bpf_csum_diff(NULL, 0, (__be32 *)&r.icmp, sizeof(r) - sizeof(r.ip), 0));
	ip_header(&r.ip, r.orig.daddr, r.orig.saddr, IPPROTO_ICMP, sizeof(r));
	return answer(skb, &r, sizeof(r));
}

// unreachable answers a UDP packet with ICMP port unreachable.
static __always_inline int unreachable(struct __sk_buff *skb)
{
	return icmp_answer(skb, ICMP_DEST_UNREACH, ICMP_PORT_UNREACH, 0);
}

// time_exceeded answers a packet that has no hop left (time to live
// exceeded in transit).
static __always_inline int time_exceeded(struct __sk_buff *skb)
{
	return icmp_answer(skb, ICMP_TIME_EXCEEDED, 0, 0);
}

// frag_needed answers a packet the next hop's mtu cannot take whole and
// whose sender forbade fragmenting it (DF): fragmentation needed, the
// next-hop MTU in the header's last 16 bits (RFC 1191), so that the
// sender's path MTU discovery sends smaller packets.
static __always_inline int frag_needed(struct __sk_buff *skb, __u16 mtu)
{
	return icmp_answer(skb, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, bpf_htonl(mtu));
}

#endif
