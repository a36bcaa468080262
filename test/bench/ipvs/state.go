package main

import "net/netip"

// The synthetic cluster is benchkit's, the one test/bench/nftables and
// test/bench/iptables program (so the numbers compare), up to maxServices
// services, on a node with address benchNodeIP.
var (
	benchNodeIP = netip.MustParseAddr("198.19.254.10") // outside the endpoint range
	maxServices = 12000                                // endpoints stay below 198.19.254.0, node ports below 65536
)
