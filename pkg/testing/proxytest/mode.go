package proxytest

import (
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ModeOf is the mode tests call a backend's Sync in when they stand in for
// the syncer and only the State speaks: a full sync for a State computed
// from scratch (Changed nil), a partial one otherwise. The syncer has more
// reasons (pkg/pipeline/syncer decide); tests of those pass a mode themselves.
func ModeOf(st *desired.State) proxy.SyncMode {
	if st.Changed == nil {
		return proxy.FullSync
	}
	return proxy.PartialSync
}
