package syncer

import (
	"context"

	"k8s.io/klog/v2"
)

// watchCanary checks the Proxier's canary every SyncPeriod until ctx is
// done. Between syncs a backend trusts what it committed, so without this
// rules removed by someone else (a firewall reload flushing iptables, an
// admin deleting the nftables table) would come back only with the hourly
// full sync, and as a full sync that does not read the kernel again.
func (s *Syncer) watchCanary(ctx context.Context) {
	if s.o.SyncPeriod <= 0 {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.clock.After(s.o.SyncPeriod):
		}
		s.checkCanary(ctx)
	}
}

// checkCanary asks the Proxier once whether its canary is gone and, if it
// is, requests a sync that decide makes a RecoverySync.
func (s *Syncer) checkCanary(ctx context.Context) {
	missing, err := s.o.Proxier.CanaryMissing(ctx)
	if err != nil {
		klog.ErrorS(err, "Checking the dataplane canary failed", "ipFamily", s.family)
		return
	}
	if missing {
		klog.InfoS("Our rules were removed by someone else (canary gone); the next sync is a recovery sync", "ipFamily", s.family)
		s.canaryGone.Store(true)
		s.Request()
	}
}
