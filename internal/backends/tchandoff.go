package backends

import (
	"context"
	"fmt"

	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
)

// tcDrainTimes bound the drain of the tc programs (nodeport.DrainTimes);
// tests shorten them.
var tcDrainTimes = nodeport.DefaultDrainTimes

// handOverTC hands the connections the tc programs pinned in dir still
// hold, once the drain's wait is over, to the kernel's conntrack of the
// daemon's network namespace (nodeport.HandOver), so that they are not
// reset when the programs go: netfilter's NAT carries them on in a family
// that has a nat hook, the running mode's rules' or anyone's. Without one
// (--cleanup on a node with no other nat rules) the kernel tracks them
// untranslated and they are reset as before. A connection the kernel
// refuses, or a handover that fails, is reset too; the removal goes on
// either way.
func handOverTC(ctx context.Context, dir string, conntrack func() (*kconntrack.Client, error)) {
	logger := klog.FromContext(ctx)
	open := func() (nodeport.KernelConntrack, error) { return conntrack() }
	h, err := nodeport.HandOver(ctx, dir, open, tcDrainTimes)
	for _, r := range h.Refused {
		logger.V(2).Info("The kernel's conntrack refused a connection the tc programs translated; it will be reset",
			"protocol", r.Flow.Proto, "client", r.Flow.Orig.Src, "frontend", r.Flow.Orig.Dst, "endpoint", r.Flow.DNAT, "err", r.Err)
	}
	if err != nil {
		logger.Error(err, "Handing the connections the tc programs translated to the kernel's conntrack failed; those not handed over will be reset",
			"handedOver", h.Handed)
		return
	}
	if h.Handed == 0 && len(h.Refused) == 0 {
		return
	}
	logger.Info("Handed the connections the tc programs translated to the kernel's conntrack, whose NAT carries them on",
		"handedOver", h.Handed, "refused", len(h.Refused))
}

// conntrackHere opens the kernel's conntrack of the calling thread's
// network namespace, from any thread later (the daemon runs in one
// namespace; a test in the node's). The namespace stays open until inst
// closes.
func conntrackHere(inst *Instance) func() (*kconntrack.Client, error) {
	ns, err := netns.Get()
	if err != nil {
		return func() (*kconntrack.Client, error) { return nil, fmt.Errorf("the network namespace: %w", err) }
	}
	inst.OnClose(func() { ns.Close() })
	return func() (*kconntrack.Client, error) { return kconntrack.NewAt(ns) }
}
