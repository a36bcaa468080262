package iptables

import (
	"k8s.io/klog/v2"
)

// counters says which nfacct objects exist, so that rules may count into
// them: iptables-restore refuses a whole input in which one rule names a
// missing object.
type counters struct {
	invalidDropped     bool // nfacctInvalidDropped
	localhostNodePorts bool // nfacctLocalhostNodePorts
}

// ensureCounters creates the nfacct objects the metrics read. As upstream,
// it runs on every full sync, which follows a failed restore too: an
// object someone deleted comes back, and the rules name only those that
// exist. Both families ensure both objects (they live in the node's
// namespace, shared), as upstream's two proxiers do.
func (p *Proxier) ensureCounters() counters {
	if p.opts.NFAcct == nil {
		return counters{}
	}
	ensure := func(name string) bool {
		if err := p.opts.NFAcct.Ensure(name); err != nil {
			klog.ErrorS(err, "Failed to create nfacct counter; the corresponding metric will not be updated",
				"counter", name, "ipFamily", p.family)
			return false
		}
		return true
	}
	return counters{
		invalidDropped:     ensure(nfacctInvalidDropped),
		localhostNodePorts: ensure(nfacctLocalhostNodePorts),
	}
}
