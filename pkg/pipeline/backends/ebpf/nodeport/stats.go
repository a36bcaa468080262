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
	name := mapStats
	if family == proxy.IPv6 {
		name = mapStats6
	}
	var d Drops
	for key, n := range map[uint32]*uint64{statNoSNATPort: &d.NoMasqueradePort, statReplyLost: &d.ReplyLost} {
		var err error
		if *n, err = sumPerCPU(p.kernel.coll.Maps[name], key); err != nil {
			return Drops{}, fmt.Errorf("tc node ports: reading %s: %w", name, err)
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
