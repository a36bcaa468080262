package syncer

// What the external tests (package syncer_test) reach inside a Syncer.

// DueFullSync makes s's next sync the periodic full one.
func DueFullSync(s *Syncer) { s.lastFull = s.lastFull.Add(-FullSyncPeriod) }
