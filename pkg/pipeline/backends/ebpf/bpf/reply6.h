// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The answers of reply.h for IPv6 (included by six.h): a TCP RST, ICMPv6
// port unreachable for a datagram, ICMPv6 time exceeded for a packet
// without a hop left. The packet (an IPv6 header and the L4 header right
// after it, as parse6 checked) is rewritten into the answer and sent back
// out of the interface it came in on.

#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_PORT_UNREACH 4
#define ICMPV6_TIME_EXCEED 3
#define IPPROTO_ICMPV6_ 58

// ip6_answer fills ip as the header of an answer of len bytes of protocol
// next to the packet whose header is in, and returns the sum of the
// pseudo-header its L4 checksum covers.
static __always_inline __u32 ip6_answer(struct ipv6hdr *ip, const struct ipv6hdr *in, __u8 next, __u16 len)
{
	ip->version = 6;
	ip->payload_len = bpf_htons(len);
	ip->nexthdr = next;
	ip->hop_limit = 64;
	ip->saddr = in->daddr;
	ip->daddr = in->saddr;
	__be32 rest[2] = { bpf_htonl(len), bpf_htonl(next) };
	__u32 sum = bpf_csum_diff(NULL, 0, (__be32 *)&ip->saddr, 32, 0);
	return bpf_csum_diff(NULL, 0, rest, sizeof(rest), sum);
}

struct rst6 {
	struct ipv6hdr ip;
	struct tcphdr tcp;
};

// reset6 answers a TCP packet (its header at l4) with a RST, as reset
// does for IPv4. It is a function of its own: its stack frame is not
// added to the flow logic's.
static __noinline int reset6(struct __sk_buff *skb, __u32 l4)
{
	struct ipv6hdr in;
	struct tcphdr th;
	if (bpf_skb_load_bytes(skb, IP6_OFF, &in, sizeof(in)) || bpf_skb_load_bytes(skb, l4, &th, sizeof(th)))
		return TC_ACT_SHOT;
	struct rst6 r = {};
	r.tcp.source = th.dest;
	r.tcp.dest = th.source;
	r.tcp.doff = 5;
	r.tcp.rst = 1;
	if (th.ack) {
		r.tcp.seq = th.ack_seq;
	} else {
		__u32 seglen = bpf_ntohs(in.payload_len) - th.doff * 4 + th.syn + th.fin;
		r.tcp.ack = 1;
		r.tcp.ack_seq = bpf_htonl(bpf_ntohl(th.seq) + seglen);
	}
	__u32 sum = ip6_answer(&r.ip, &in, IPPROTO_TCP, sizeof(r.tcp));
	r.tcp.check = fold(bpf_csum_diff(NULL, 0, (__be32 *)&r.tcp, sizeof(r.tcp), sum));
	return answer(skb, &r, sizeof(r));
}

// icmp6_err6 is an ICMPv6 error quoting the packet's IPv6 header and the
// first 8 bytes of its L4 header, as icmp_answer quotes for IPv4.
struct icmp6_err6 {
	struct ipv6hdr ip;
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__u32 unused;
	struct ipv6hdr orig;
	__u8 l4[8];
};

#define ICMP6_ERR_LEN (sizeof(struct icmp6_err6) - sizeof(struct ipv6hdr))

// icmp6_answer answers a TCP or UDP packet with an ICMPv6 error of type
// and code, the header's last word rest, from the address the packet was
// sent to (a function of its own, as reset6).
static __noinline int icmp6_answer(struct __sk_buff *skb, __u8 type, __u8 code, __be32 rest)
{
	struct icmp6_err6 e = { .unused = rest };
	if (bpf_skb_load_bytes(skb, IP6_OFF, &e.orig, sizeof(e.orig) + sizeof(e.l4)))
		return TC_ACT_SHOT;
	__u32 sum = ip6_answer(&e.ip, &e.orig, IPPROTO_ICMPV6_, ICMP6_ERR_LEN);
	e.type = type;
	e.code = code;
	e.checksum = fold(bpf_csum_diff(NULL, 0, (__be32 *)&e.type, ICMP6_ERR_LEN, sum));
	return answer(skb, &e, sizeof(e));
}
// unreachable6 answers a UDP packet with ICMPv6 port unreachable.
static __always_inline int unreachable6(struct __sk_buff *skb)
{
	return icmp6_answer(skb, ICMPV6_DEST_UNREACH, ICMPV6_PORT_UNREACH, 0);
}

// time_exceeded6 answers a packet that has no hop left (hop limit
// exceeded in transit).
static __always_inline int time_exceeded6(struct __sk_buff *skb)
{
	return icmp6_answer(skb, ICMPV6_TIME_EXCEED, 0, 0);
}

// packet_too_big6 answers a packet the next hop's mtu cannot take (IPv6
// is not fragmented on the way): packet too big, naming the MTU.
static __always_inline int packet_too_big6(struct __sk_buff *skb, __u32 mtu)
{
	return icmp6_answer(skb, ICMPV6_PKT_TOOBIG, 0, bpf_htonl(mtu));
}
