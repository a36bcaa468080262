package netnstest

import "sync/atomic"

// Source ports of UDP and SCTP requests are handed out in sequence, never
// at random. A random port now and then repeats one an earlier request sent
// to the same service from, and IPVS treats that as a reused connection: UDP
// sticks to the old real server, and an SCTP INIT (with conntrack on) is
// dropped while the old connection is expired, on the assumption that the
// client retransmits. Either breaks a test that counts where requests land.
// The range lies below the kernel's ephemeral ports (32768–60999, which TCP
// connects use) and below the node-port range.
const (
	firstRequestPort = 10000
	requestPorts     = 20000
)

var requestsSent atomic.Uint32

// nextRequestPort returns the next source port; it repeats only after
// requestPorts requests from this process.
func nextRequestPort() uint16 {
	n := requestsSent.Add(1) - 1
	return uint16(firstRequestPort + n%requestPorts)
}
