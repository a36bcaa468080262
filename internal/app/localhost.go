package app

import (
	"context"

	"github.com/svcproxy/svcproxy/internal/localnodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
)

// localhostProxy returns the userspace node-port proxy of compute's family
// and its AfterSync hook, or nil when desired does not hand the family's
// localhost TCP node ports to it. The proxy stops with ctx.
func localhostProxy(ctx context.Context, compute desired.Options) func(*desired.State, model.Changes) {
	if desired.DecideLocalhost(compute) != desired.LocalhostProxied {
		return nil
	}
	lp := localnodeport.New(ctx, compute.Family, localnodeport.Options{})
	go func() {
		<-ctx.Done()
		lp.Close()
	}()
	return lp.Observe
}
