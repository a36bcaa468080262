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
// a connection wait before the next look: a look that finds none lists the
// family's whole conntrack table, and connections end on their own time.
var keptHooksRecheck = time.Minute

// errStillNeeded is a retirement's answer when what it would remove still
// serves: not a failure, and tried again after the retirement's wait.
var errStillNeeded = errors.New("still needed")

// keptHooksRetirement empties family's kept table (nftables.KeepNATHooks,
// then EmptyKeptNATHooks) once no connection the kernel translates is left
// in the family: the
// hooks serve only those, and while they stay the kernel tracks every
// connection of the family. A connection that the kernel translates is
// counted whoever's rules translated it, since this node's conntrack does
// not say; so another agent's DNAT (a CNI's host ports) keeps the table
// as long as it has connections, which costs only the tracking that agent
// needs anyway.
func keptHooksRetirement(family proxy.IPFamily) *retirement {
	return &retirement{what: "the kept nat hooks", every: keptHooksRecheck, remove: func(ctx context.Context) error {
		translated, err := anyDNATed(ctx, family)
		if err != nil {
			return err
		}
		if translated {
			return fmt.Errorf("%w: the kernel translates a connection of the family", errStillNeeded)
		}
		gone, err := nftables.EmptyKeptNATHooks(ctx, family)
		if err == nil && !gone {
			// Rules another start wrote since: not what this start kept.
			return nil
		}
		return err
	}}
}

// anyDNATed says whether the kernel's conntrack holds a connection of
// family whose destination it translates. The kernel sends only those
// (ListDNATed), so the look that finds none, on a node with a big table,
// costs a walk of the table in the kernel rather than every flow read
// here; it stops reading at the first. A dump the kernel reports as
// interrupted may have missed one, so it says yes.
func anyDNATed(ctx context.Context, family proxy.IPFamily) (bool, error) {
	ct, err := kconntrack.New()
	if err != nil {
		return false, err
	}
	defer ct.Close()
	listing, stop := context.WithCancel(ctx)
	defer stop()
	found := false
	err = ct.ListDNATed(listing, family, func(f kconntrack.Flow) {
		if f.DNATed() {
			found = true
			stop()
		}
	})
	if found || errors.Is(err, kconntrack.ErrInterrupted) {
		return true, nil
	}
	return false, err
}
