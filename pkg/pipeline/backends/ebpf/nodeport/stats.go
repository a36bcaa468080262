package nodeport

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// mapStats is np_stats: per-CPU counters of what the programs drop by
// themselves, indexed as statNoSNATPort.
const mapStats = "np_stats"

// statNoSNATPort is bpf/nodeport.c's NP_STAT_NO_SNAT_PORT.
const statNoSNATPort = 0

// Drops counts packets the programs dropped by themselves, since their
// maps were created (a restart adopts them, and their counts).
type Drops struct {
	// NoMasqueradePort counts new flows dropped because no masquerade
	// port was free toward their endpoint: every reply tuple the search
	// tried belonged to a live flow.
	NoMasqueradePort uint64
}

// Drops reads the programs' counters, summed over the CPUs; zeros before
// the first Sync loaded them.
func (p *Proxier) Drops() (Drops, error) {
	if p.kernel == nil {
		return Drops{}, nil
	}
	n, err := sumPerCPU(p.kernel.coll.Maps[mapStats], statNoSNATPort)
	if err != nil {
		return Drops{}, fmt.Errorf("tc node ports: reading %s: %w", mapStats, err)
	}
	return Drops{NoMasqueradePort: n}, nil
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
