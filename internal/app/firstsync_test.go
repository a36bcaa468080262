package app

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestFirstSyncsWaitsForEveryFamily: the other modes' rules may go only
// once every family of this mode has programmed its own; a family's later
// syncs change nothing.
func TestFirstSyncsWaitsForEveryFamily(t *testing.T) {
	f := newFirstSyncs([]proxy.IPFamily{proxy.IPv4, proxy.IPv6})
	v4 := f.afterSync(proxy.IPv4)
	v4(nil, model.Changes{})
	v4(nil, model.Changes{})
	if closed(f.done) {
		t.Fatal("done after IPv4's syncs alone; IPv6 has not synced")
	}
	f.afterSync(proxy.IPv6)(nil, model.Changes{})
	if !closed(f.done) {
		t.Fatal("not done after both families synced")
	}
	f.afterSync(proxy.IPv6)(nil, model.Changes{}) // closing twice would panic
}

func TestFirstSyncsNoFamilies(t *testing.T) {
	if !closed(newFirstSyncs(nil).done) {
		t.Fatal("nothing to wait for, yet not done")
	}
}
