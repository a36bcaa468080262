package kiptables

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// nftChainExists reports whether iptables-nft's table of family holds
// chain: iptables-nft keeps table "nat" of family ip (ip6) as the
// nf_tables table of that name, so one netlink get of the chain answers,
// in the calling thread's network namespace, where "iptables-nft -S CHAIN
// 1" would start a process (tens of ms on a busy node) to ask the same.
// A missing table has no chain.
func nftChainExists(family proxy.IPFamily, table Table, chain string) (bool, error) {
	fd, err := knetlink.OpenNetfilter()
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	nfproto := uint8(unix.NFPROTO_IPV4)
	if family == proxy.IPv6 {
		nfproto = unix.NFPROTO_IPV6
	}
	const seq = 1
	req := knetlink.AppendHeader(nil, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETCHAIN,
		unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, nfproto, 0)
	req = knetlink.AppendString(req, unix.NFTA_CHAIN_TABLE, string(table))
	req = knetlink.AppendString(req, unix.NFTA_CHAIN_NAME, chain)
	knetlink.SetLen(req, 0)
	if err := knetlink.Send(fd, req); err != nil {
		return false, fmt.Errorf("netlink send: %w", err)
	}
	// The reply is the chain (a few hundred bytes) and the ack.
	buf := make([]byte, 16<<10)
	found := false
	for {
		n, err := knetlink.Receive(fd, buf)
		if err != nil {
			return false, fmt.Errorf("netlink receive: %w", err)
		}
		var end error
		err = knetlink.Messages(buf[:n], func(typ, _ uint16, s uint32, body []byte) error {
			if s != seq {
				return nil
			}
			if end = knetlink.ReplyEnd(typ, body); end != nil {
				return end
			}
			found = true
			return nil
		})
		switch {
		case errors.Is(end, knetlink.ErrEnd):
			return found, nil
		case errors.Is(end, unix.ENOENT):
			return false, nil
		case end != nil:
			return false, fmt.Errorf("getting chain %s/%s: %w", table, chain, end)
		case err != nil:
			return false, err
		}
	}
}
