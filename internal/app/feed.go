package app

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// feed is one tracker per IP family and the informers that fill them. It
// starts first, before the node setup, the backends' Init, the cleanup of
// other modes and the wait for this Node, so that the initial lists of
// Services and EndpointSlices (most of a start at scale) are read and
// parsed while those run. Its requests for a sync go nowhere until the
// family's syncer exists; the syncer's first sync takes whatever the
// tracker holds by then.
type feed struct {
	trackers map[proxy.IPFamily]*model.Tracker
	syncers  map[proxy.IPFamily]*atomic.Pointer[syncer.Syncer]
	// sizes are the initial lists' sizes, from their first pages.
	sizes *listSizes
}

// startFeed builds the trackers of families and starts their informers.
func (d *daemon) startFeed(ctx context.Context, families []proxy.IPFamily) (*feed, error) {
	f := &feed{
		trackers: make(map[proxy.IPFamily]*model.Tracker, len(families)),
		syncers:  make(map[proxy.IPFamily]*atomic.Pointer[syncer.Syncer], len(families)),
		sizes:    newListSizes(),
	}
	var targets []watch.Target
	for _, family := range proxy.Families {
		if !slices.Contains(families, family) {
			continue
		}
		tracker := model.NewTracker(family)
		tracker.SetProblemReporter(d.events.invalidParts)
		tracker.SetEventCounter(syncer.ChangeCounter{})
		s := &atomic.Pointer[syncer.Syncer]{}
		f.trackers[family], f.syncers[family] = tracker, s
		targets = append(targets, watch.Target{Tracker: tracker, SyncNeeded: func() {
			if s := s.Load(); s != nil {
				s.Request()
			}
		}})
	}
	informers, err := watch.NewInformers(d.client, watch.Options{
		ResyncPeriod:     d.cfg.ConfigSyncPeriod,
		ServiceProxyName: d.cfg.ServiceProxyName,
		ContinuePages:    d.pages,
		ListSized:        f.sizes.sized,
	}, targets...)
	if err != nil {
		return nil, err
	}
	informers.Start(ctx)
	return f, nil
}

// connect makes family's sync requests go to s.
func (f *feed) connect(family proxy.IPFamily, s *syncer.Syncer) { f.syncers[family].Store(s) }
