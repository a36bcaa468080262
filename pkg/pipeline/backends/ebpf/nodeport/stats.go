package nodeport

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// mapStats is np_stats: per-CPU counters of what the programs drop by
// themselves in IPv4 flows, indexed by the stat* constants; mapStats6 in
// IPv6 flows.
const (
	mapStats  = "np_stats"
	mapStats6 = "np_stats6"
)

// bpf/nodeport.c's NP_STAT_*.
const (
	statNoSNATPort = 0
	statReplyLost  = 1
)

// bpf/nodeport.c's NP_STAT_DSR_*, indexes of np_stats_dsr (mapStatsDSR)
// for IPv4; IPv6's follow them, statsDSR further.
const (
	statDSRTooBig = 0
	statDSRNoFlow = 1
	statsDSR      = 2
)

// Drops counts packets the programs dropped by themselves, since their
// maps were created (a restart adopts them, and their counts).
type Drops struct {
	// NoMasqueradePort counts new flows dropped because no masquerade
	// port was free toward their endpoint: every reply tuple the search
	// tried belonged to a live flow.
	NoMasqueradePort uint64
	// ReplyLost counts masqueraded flows ended because another flow had
	// taken their reply tuple after the table evicted their entry there:
	// flows an older svcproxy made, without reservations, found when a
	// start seeds them (seedSNAT).
	ReplyLost uint64
	// DSRTooBig counts packets of flows tunnelled to a peer node (direct
	// server return) that the tunnel's header made too big for the way
	// out, when no answer could tell the client (IPv4 without DF).
	DSRTooBig uint64
	// DSRNoFlow counts packets a peer tunnelled here that no flow or
	// frontend here took (a State behind the peer's, an endpoint gone):
	// dropped, never passed on decapsulated.
	DSRNoFlow uint64
}

// Drops reads the programs' counters of family's flows, summed over the
// CPUs; zeros before the first Sync loaded them.
func (p *Proxier) Drops(family proxy.IPFamily) (Drops, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropsLocked(family)
}

func (p *Proxier) dropsLocked(family proxy.IPFamily) (Drops, error) {
	if p.kernel == nil {
		return Drops{}, nil
	}
	name, dsrBase := mapStats, uint32(0)
	if family == proxy.IPv6 {
		name, dsrBase = mapStats6, statsDSR
	}
	var d Drops
	for _, c := range []struct {
		name string
		key  uint32
		n    *uint64
	}{
		{name, statNoSNATPort, &d.NoMasqueradePort}, {name, statReplyLost, &d.ReplyLost},
		{mapStatsDSR, dsrBase + statDSRTooBig, &d.DSRTooBig}, {mapStatsDSR, dsrBase + statDSRNoFlow, &d.DSRNoFlow},
	} {
		var err error
		if *c.n, err = sumPerCPU(p.kernel.coll.Maps[c.name], c.key); err != nil {
			return Drops{}, fmt.Errorf("tc node ports: reading %s: %w", c.name, err)
		}
	}
	return d, nil
}

// sumPerCPU is the sum of the CPUs' values of key in m, a per-CPU array
// of counters.
func sumPerCPU(m *ebpf.Map, key uint32) (uint64, error) {
	var per []uint64
	if err := m.Lookup(key, &per); err != nil {
		return 0, err
	}
	var sum uint64
	for _, n := range per {
		sum += n
	}
	return sum, nil
}
