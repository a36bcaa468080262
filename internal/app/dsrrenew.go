package app

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// dsrRenewPeriod is how often an advertising node renews its Lease, and
// dsrLeaseDuration the leaseDurationSeconds it writes: how long the peers
// go on tunnelling here after they last saw a renewal. Two renewals may
// fail (the API server away, a retry backing off) before they stop. Every
// renewal reaches every node's watch, so the period is kubelet's default
// for reporting an unchanged Node status, which the same watchers receive
// already: the renewals at most double what DSR's watches carry, where a
// period of seconds would make them the bulk of it on a large cluster.
// Tests shorten them.
var (
	dsrRenewPeriod   = 5 * time.Minute
	dsrLeaseDuration = 15 * time.Minute
)

// errNotAdvertised is a renewal's finding that the Lease is gone or names
// another Node: it was withdrawn (--cleanup, a start without --bpf-dsr),
// deleted with its namespace, or taken over by a later Node of the name.
var errNotAdvertised = errors.New("the DSR Lease is gone or names another Node")

// want is the Lease as this node advertises itself, renewed now.
func (l *dsrLease) want() *coordinationv1.Lease {
	holder := l.node
	now := metav1.NewMicroTime(time.Now())
	out := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.node, Namespace: l.namespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: l.node, UID: l.nodeUID}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &now},
	}
	renewed(out)
	return out
}

// renewed sets l's renew time to now and its duration to
// dsrLeaseDuration.
func renewed(l *coordinationv1.Lease) {
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(dsrLeaseDuration / time.Second)
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, &seconds
}

// advertise writes the Lease, retrying with backoff until it is written or
// ctx ends, then renews it until ctx ends or it is no longer this node's;
// each failure is logged. Syncing goes on meanwhile: until it is written,
// peers only masquerade to this node's endpoints, as without DSR.
func (l *dsrLease) advertise(ctx context.Context) {
	if !l.retry(ctx, l.put, "Advertising DSR decapsulation failed; peers masquerade to this node's endpoints until it succeeds") {
		return
	}
	l.logger.Info("Advertising DSR decapsulation", "lease", l.name(), "renewEvery", dsrRenewPeriod, "duration", dsrLeaseDuration)
	for sleepCtx(ctx, renewDelay(dsrRenewPeriod, rand.Float64())) {
		if !l.retry(ctx, l.renew, "Renewing the DSR advertisement failed; peers stop tunnelling here if it stays overdue") {
			return
		}
	}
}

// renewDelay is the wait before a renewal: period, spread by up to a tenth
// either way (u is uniform in [0, 1)), so that nodes whose renewals fell
// into step (retries that ended together after an API server outage, a
// cluster's nodes started at once) drift apart again instead of sending
// every node's renewal, and every watch its fan-out, at one moment. The
// Lease's duration (three periods) leaves room for two late renewals.
func renewDelay(period time.Duration, u float64) time.Duration {
	return time.Duration(float64(period) * (0.9 + 0.2*u))
}

// retry runs op until it succeeds (true), ctx ends or op finds the Lease
// no longer this node's (false), logging each failure with failed and
// backing off between tries.
func (l *dsrLease) retry(ctx context.Context, op func(context.Context) error, failed string) bool {
	backoff := dsrAdvertiseBackoff
	for {
		err := op(ctx)
		switch {
		case err == nil:
			return true
		case errors.Is(err, errNotAdvertised):
			// Renewing now would advertise what this node was withdrawn
			// from, or write another Node's Lease.
			l.logger.Info("Stopped renewing the DSR advertisement: the Lease is gone or names another Node; this node advertises again at its next start with --bpf-dsr",
				"lease", l.name())
			return false
		case ctx.Err() != nil:
			return false
		}
		delay := backoff.Step()
		l.logger.Error(err, failed, "lease", l.name(), "retryIn", delay)
		if !sleepCtx(ctx, delay) {
			return false
		}
	}
}

// put creates the Lease, or renews the one there, taking over one whose
// holder or owner is not this Node's (an earlier Node of the name).
func (l *dsrLease) put(ctx context.Context) error {
	want := l.want()
	_, err := l.client.CoordinationV1().Leases(l.namespace).Create(ctx, want, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return l.update(ctx, func(have *coordinationv1.Lease) error {
		if !sameAdvertisement(have, want) {
			have.OwnerReferences, have.Spec = want.OwnerReferences, want.Spec
		}
		renewed(have)
		return nil
	})
}

// renew renews the Lease if it is still this node's advertisement, and
// returns errNotAdvertised otherwise: it never writes one back.
func (l *dsrLease) renew(ctx context.Context) error {
	err := l.update(ctx, func(have *coordinationv1.Lease) error {
		if !sameAdvertisement(have, l.want()) {
			return errNotAdvertised
		}
		renewed(have)
		return nil
	})
	if apierrors.IsNotFound(err) {
		return errNotAdvertised
	}
	return err
}

// update reads the Lease, has modify change it and writes it back with
// the resourceVersion read, so that a concurrent writer (a --cleanup
// deleting it, a later Node of the name taking it) is not overwritten: on
// a conflict it reads again.
func (l *dsrLease) update(ctx context.Context, modify func(*coordinationv1.Lease) error) error {
	api := l.client.CoordinationV1().Leases(l.namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		callCtx, cancel := context.WithTimeout(ctx, dsrCallTimeout)
		defer cancel()
		have, err := api.Get(callCtx, l.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := modify(have); err != nil {
			return err
		}
		_, err = api.Update(callCtx, have, metav1.UpdateOptions{})
		return err
	})
}

// sameAdvertisement says whether have names the holder and owner want
// names.
func sameAdvertisement(have, want *coordinationv1.Lease) bool {
	if have.Spec.HolderIdentity == nil || *have.Spec.HolderIdentity != *want.Spec.HolderIdentity || len(have.OwnerReferences) != 1 {
		return false
	}
	o, w := have.OwnerReferences[0], want.OwnerReferences[0]
	return o.Kind == w.Kind && o.Name == w.Name && o.UID == w.UID
}

// name is the Lease's namespace/name, as logged.
func (l *dsrLease) name() string { return l.namespace + "/" + l.node }

// sleepCtx waits d and reports true, or reports false once ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
