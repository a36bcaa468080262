package app

import (
	"context"
	"net"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Direct server return's advertisement (docs/user/dsr.md): a node whose tc
// programs decapsulate says so with a Lease named after it in
// --bpf-dsr-namespace, held by its name and owned by its Node (so that it
// goes with the Node). Other nodes tunnel to it only while the Lease is
// there and renewed (watch.Peers). It is written once the programs have
// synced every family and renewed while this process runs (dsrrenew.go),
// so that a node that stops decapsulating without withdrawing (its pins
// wiped, its image swapped for upstream kube-proxy, the node gone dark)
// stops getting tunnels once its renewal is overdue. It is deleted before
// the programs stop decapsulating, which only a start without --bpf-dsr
// (another mode, ebpf mode without the flag or without tc programs) or
// --cleanup does.

// dsrWithdrawWait is how long a withdrawal waits, once the Lease is
// deleted, before anything stops decapsulating: the time the peers' watches
// take to see the deletion and their next syncs to stop tunnelling here.
// Tests shorten it.
var dsrWithdrawWait = 5 * time.Second

// dsrAdvertiseBackoff paces the retries of an advertisement or a renewal
// the API server refused or did not answer.
var dsrAdvertiseBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: time.Minute}

// dsrCallTimeout bounds one API call of a withdrawal, which a start or
// --cleanup waits for.
const dsrCallTimeout = 10 * time.Second

// dsrLease is this node's advertisement.
type dsrLease struct {
	client    kubernetes.Interface
	namespace string
	node      string
	// nodeUID is the owner's UID, "" where the Node is not known
	// (--cleanup deletes only).
	nodeUID types.UID
	logger  klog.Logger
}

// withdraw deletes the Lease and, if there was one, waits dsrWithdrawWait
// for the peers to stop tunnelling here, before the caller lets anything
// stop decapsulating. No Lease (nor namespace) is nothing to do; a
// refusal (no deploy/components/dsr) or an unreachable API server is
// logged and the caller goes on: it must not keep a node from starting
// or cleaning up.
func (l *dsrLease) withdraw(ctx context.Context) {
	callCtx, cancel := context.WithTimeout(ctx, dsrCallTimeout)
	err := l.client.CoordinationV1().Leases(l.namespace).Delete(callCtx, l.node, metav1.DeleteOptions{})
	cancel()
	lease := l.namespace + "/" + l.node
	switch {
	case apierrors.IsNotFound(err):
		l.logger.V(2).Info("No DSR advertisement of an earlier start to withdraw", "lease", lease)
		return
	case apierrors.IsForbidden(err):
		// The API server's words say which refused: RBAC (no component
		// dsr) or the component's admission policy (a token that names no
		// node, or another node).
		l.logger.Info("Cannot look for a DSR advertisement of an earlier start: not allowed (deploy/components/dsr grants it)", "lease", lease, "reason", err.Error())
		return
	case err != nil:
		l.logger.Error(err, "Withdrawing the DSR advertisement of an earlier start failed; peers may tunnel here until it is deleted", "lease", lease)
		return
	}
	l.logger.Info("Withdrew this node's DSR advertisement; waiting for the peers to stop tunnelling here", "lease", lease, "wait", dsrWithdrawWait)
	select {
	case <-ctx.Done():
	case <-time.After(dsrWithdrawWait):
	}
}

// dsrLease is this node's advertisement in d's namespace.
func (d *daemon) dsrLease() *dsrLease {
	return &dsrLease{client: d.client, namespace: d.cfg.BPFDSRNamespace, node: d.nodeName, nodeUID: d.nodeInfo.UID, logger: d.logger}
}

// withdrawDSR withdraws, at a start without --bpf-dsr, the advertisement
// an earlier start with it left (in any mode: whatever this one runs, it
// decapsulates nothing), before anything is programmed.
func (d *daemon) withdrawDSR(ctx context.Context) {
	if !d.cfg.BPFDSR && d.cfg.BPFDSRNamespace != "" {
		d.dsrLease().withdraw(ctx)
	}
}

// advertiseDSRAfter advertises, with --bpf-dsr, once every family has
// synced (synced closed): the tc programs decapsulate from then on. A
// node whose addresses are not all on its tc interfaces does not: peers
// tunnel to those addresses, and only the tc programs decapsulate. It
// withdraws what an earlier start with other interfaces advertised
// instead, before the first sync (it runs before the sync loops). The
// channel returned closes once it no longer advertises nor renews.
func (d *daemon) advertiseDSRAfter(ctx context.Context, synced <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	if !d.cfg.BPFDSR {
		close(done)
		return done
	}
	dsrLeaseTimesForTest(d.logger)
	if missing := addrsOffLinks(d.nodeInfo.IPs, d.cfg.BPFTCInterfaces, linkAddrs); len(missing) > 0 {
		d.logger.Error(nil, "Not advertising DSR decapsulation: peers tunnel to this Node's addresses, and these are not on --bpf-tc-interfaces, where the tc programs decapsulate; this node's endpoints are reached as without DSR",
			"addresses", missing, "interfaces", d.cfg.BPFTCInterfaces)
		d.dsrLease().withdraw(ctx)
		close(done)
		return done
	}
	go func() {
		defer close(done)
		select {
		case <-synced:
			d.dsrLease().advertise(ctx)
		case <-ctx.Done():
		}
	}()
	return done
}

// addrsOffLinks are the addresses of ips that none of links holds, as
// addrsOf lists a link's (an unreadable link holds none).
func addrsOffLinks(ips []netip.Addr, links []string, addrsOf func(link string) []netip.Addr) []netip.Addr {
	held := map[netip.Addr]bool{}
	for _, link := range links {
		for _, a := range addrsOf(link) {
			held[a] = true
		}
	}
	var missing []netip.Addr
	for _, ip := range ips {
		if !held[ip] {
			missing = append(missing, ip)
		}
	}
	return missing
}

// linkAddrs lists the addresses of the network interface named link.
func linkAddrs(link string) []netip.Addr {
	iface, err := net.InterfaceByName(link)
	if err != nil {
		return nil
	}
	return addrsOfInterface(*iface)
}
