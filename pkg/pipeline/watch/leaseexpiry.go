package watch

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// leaseExpiryGrace is added to a Lease's duration before it stops
// counting: the time a renewal takes to reach this process's watch.
const leaseExpiryGrace = 5 * time.Second

// leaseObservations judges whether the nodes' Leases are still renewed,
// as client-go's leader election does: by this process's clock, from when
// it last saw each Lease's renewal change, never by comparing the renew
// time a node wrote with this clock (the nodes' clocks may disagree).
type leaseObservations struct {
	seen map[string]leaseObservation
}

// leaseObservation is what this process last saw of one Lease's
// renewal, and when it saw it change.
type leaseObservation struct {
	renewal string
	at      time.Time
}

// live returns the objects of leases that count at now, and the earliest
// time one of those stops counting (zero if none will). It first notes
// every Lease whose renewal changed as renewed at now; a Lease first seen
// (at a start, too) counts as just renewed. A Lease without a duration
// (written by an older svcproxy, which never renews) counts while it
// exists. Anything not a Lease passes unchanged.
func (o *leaseObservations) live(leases []any, now time.Time) ([]any, time.Time) {
	if o.seen == nil {
		o.seen = map[string]leaseObservation{}
	}
	present := make(map[string]bool, len(leases))
	var out []any
	var next time.Time
	for _, obj := range leases {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			out = append(out, obj)
			continue
		}
		present[l.Name] = true
		seen, ok := o.seen[l.Name]
		if r := renewalOf(l); !ok || seen.renewal != r {
			seen = leaseObservation{renewal: r, at: now}
			o.seen[l.Name] = seen
		}
		if l.Spec.LeaseDurationSeconds == nil {
			out = append(out, obj)
			continue
		}
		expiry := seen.at.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second + leaseExpiryGrace)
		if expiry.After(now) {
			out = append(out, obj)
			if next.IsZero() || expiry.Before(next) {
				next = expiry
			}
		}
	}
	for name := range o.seen {
		if !present[name] {
			delete(o.seen, name)
		}
	}
	return out, next
}

// renewalOf identifies a Lease's last renewal: its renew time, as its
// holder wrote it (compared for change only, never with a clock), or its
// resource version where it has none.
func renewalOf(l *coordinationv1.Lease) string {
	if l.Spec.RenewTime == nil {
		return "rv:" + l.ResourceVersion
	}
	return l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
}
