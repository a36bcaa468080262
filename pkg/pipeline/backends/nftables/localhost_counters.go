package nftables

import (
	"context"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// counterListTimeout bounds one scrape's read of a table's counters, so a
// hung nft cannot hold /metrics (upstream allows the same).
const counterListTimeout = 5 * time.Second

// RejectCounters reads the localhost node-port reject counters of both
// families' tables; it fits metrics.LocalhostRejects.
type RejectCounters struct {
	nft map[proxy.IPFamily]knftables.Interface
}

// NewRejectCounters returns a reader of the tables of families.
func NewRejectCounters(families []proxy.IPFamily) *RejectCounters {
	r := &RejectCounters{nft: map[proxy.IPFamily]knftables.Interface{}}
	for _, f := range families {
		nft, err := knftables.New(specFor(f).family, TableName)
		if err != nil {
			klog.ErrorS(err, "Cannot read the localhost node port reject counters", "ipFamily", f)
			continue
		}
		r.nft[f] = nft
	}
	return r
}

// NewRejectCountersWithInterface returns a reader of the given tables
// (tests pass knftables fakes).
func NewRejectCountersWithInterface(nft map[proxy.IPFamily]knftables.Interface) *RejectCounters {
	return &RejectCounters{nft: nft}
}

// RejectedPackets is part of metrics.LocalhostRejects. A table that is
// not there (yet) has nothing to report.
func (r *RejectCounters) RejectedPackets() map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for family, nft := range r.nft {
		ctx, cancel := context.WithTimeout(context.Background(), counterListTimeout)
		counters, err := nft.ListCounters(ctx)
		cancel()
		if err != nil {
			if !knftables.IsNotFound(err) {
				klog.ErrorS(err, "Listing nftables counters failed", "ipFamily", family)
			}
			continue
		}
		for _, c := range counters {
			if c == nil {
				continue
			}
			proto, ok := strings.CutPrefix(c.Name, localhostRejectCount)
			if !ok || c.Packets == nil {
				continue
			}
			if out[string(family)] == nil {
				out[string(family)] = map[string]uint64{}
			}
			out[string(family)][strings.ToUpper(proto)] = *c.Packets
		}
	}
	return out
}
