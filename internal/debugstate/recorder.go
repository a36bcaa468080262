package debugstate

import (
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Path is where the state is served on the local API's socket.
const Path = "/debug/svcproxy/state"

// Recorder holds the last programmed State of each family. Record is cheap
// (one atomic store of a pointer; States are immutable) so it can run after
// every sync; the JSON is built only when someone asks.
type Recorder struct {
	v4, v6 atomic.Pointer[recorded]
	now    func() time.Time
}

type recorded struct {
	state *desired.State
	at    time.Time
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{now: time.Now} }

// Record stores state as the latest of its family. Its signature is
// syncer.Options.AfterSync's.
func (r *Recorder) Record(state *desired.State, _ model.Changes) {
	if state == nil {
		return
	}
	if p := r.slot(state.Family); p != nil {
		p.Store(&recorded{state: state, at: r.now()})
	}
}

// Then returns an AfterSync function that records the state and then
// calls next (nil allowed), so the Recorder can sit in front of another
// AfterSync consumer such as the conntrack reconciler.
func (r *Recorder) Then(next func(*desired.State, model.Changes)) func(*desired.State, model.Changes) {
	return func(state *desired.State, changes model.Changes) {
		r.Record(state, changes)
		if next != nil {
			next(state, changes)
		}
	}
}

// Latest returns the last recorded State of family and when it was
// recorded; nil before the family's first successful sync.
func (r *Recorder) Latest(family proxy.IPFamily) (*desired.State, time.Time) {
	p := r.slot(family)
	if p == nil {
		return nil, time.Time{}
	}
	rec := p.Load()
	if rec == nil {
		return nil, time.Time{}
	}
	return rec.state, rec.at
}

func (r *Recorder) slot(family proxy.IPFamily) *atomic.Pointer[recorded] {
	switch family {
	case proxy.IPv4:
		return &r.v4
	case proxy.IPv6:
		return &r.v6
	}
	return nil
}
