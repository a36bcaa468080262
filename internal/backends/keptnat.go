package backends

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// keptHooksRecheck is how long a family's kept nat hooks that still serve
// a connection wait before the next look: a look lists the family's whole
// conntrack table, and connections end on their own time.
var keptHooksRecheck = time.Minute

// errStillNeeded is a retirement's answer when what it would remove still
// serves: not a failure, and tried again after the retirement's wait.
var errStillNeeded = errors.New("still needed")

// keptHooksRetirement removes family's kept nat hooks (nftables.KeepNATHooks)
// once no connection the kernel translates is left in the family: the
// hooks serve only those, and while they stay the kernel tracks every
// connection of the family. A connection that the kernel translates is
// counted whoever's rules translated it, since this node's conntrack does
// not say; so another agent's DNAT (a CNI's host ports) keeps the table
// as long as it has connections, which costs only the tracking that agent
// needs anyway.
func keptHooksRetirement(family proxy.IPFamily) *retirement {
	return &retirement{what: "the kept nat hooks", every: keptHooksRecheck, remove: func(ctx context.Context) error {
		n, err := dnatedFlows(ctx, family)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %d connections the kernel translates", errStillNeeded, n)
		}
		gone, err := nftables.RemoveKeptNATHooks(ctx, family)
		if err == nil && !gone {
			// Rules another start wrote since: not what this start kept.
			return nil
		}
		return err
	}}
}

// dnatedFlows counts family's connections whose destination the kernel's
// conntrack translates. A dump the kernel reports as interrupted may have
// missed some, so it counts as one.
func dnatedFlows(ctx context.Context, family proxy.IPFamily) (int, error) {
	ct, err := kconntrack.New()
	if err != nil {
		return 0, err
	}
	defer ct.Close()
	n := 0
	err = ct.List(ctx, family, func(f kconntrack.Flow) {
		if f.DNATed() {
			n++
		}
	})
	if errors.Is(err, kconntrack.ErrInterrupted) {
		return max(n, 1), nil
	}
	return n, err
}
