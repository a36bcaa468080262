package backends

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// meetingHalf is one half of ebpf mode whose Sync returns only once the
// other half's Sync has started too (or fails after a while): the halves
// must run at once.
type meetingHalf struct {
	mine, other chan struct{}
	err         error
}

func (h *meetingHalf) Init(context.Context) error                  { return nil }
func (h *meetingHalf) CanaryMissing(context.Context) (bool, error) { return false, nil }
func (h *meetingHalf) Cleanup(context.Context) error               { return nil }

func (h *meetingHalf) Sync(context.Context, *desired.State, proxy.SyncMode) error {
	close(h.mine)
	select {
	case <-h.other:
		return h.err
	case <-time.After(2 * time.Second):
		return errors.New("the other half did not start while this one ran")
	}
}

func TestSyncBothRunsTheHalvesAtOnce(t *testing.T) {
	a, b := make(chan struct{}), make(chan struct{})
	errHooks, errRules := errors.New("hooks failed"), errors.New("rules failed")
	hooks := &meetingHalf{mine: a, other: b, err: errHooks}
	rules := &meetingHalf{mine: b, other: a, err: errRules}
	err := syncBoth(context.Background(), &desired.State{}, proxy.FullSync, hooks, rules)
	if !errors.Is(err, errHooks) || !errors.Is(err, errRules) {
		t.Errorf("syncBoth = %v, want both halves' own errors (each met the other)", err)
	}
}
