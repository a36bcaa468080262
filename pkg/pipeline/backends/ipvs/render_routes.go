package ipvs

import (
	"fmt"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// IPVS renders desired's routes as far as a virtual server can, and
// decides nothing itself. A virtual server has one set of real servers
// whatever the client, so each path uses its outside route's dispatch for
// every source class. The cluster-IP path's masquerade is the iptables
// rules' (by source class, from the State's masquerade policy); routes the
// rules would not give fail the sync instead of being rendered as something
// else. The external path's masquerade is per service port: unmasqueraded
// traffic goes through the -LOCAL sets. Pods and the node take the outside
// route of the external path too: the eTP=Local short-cut (Cluster, the
// node's traffic masqueraded) is the one documented approximation
// (README.md), as is REJECT for an empty dispatch whose verdict is DROP.

// portRoutes are the routes one service port is rendered with.
type portRoutes struct {
	clusterIP, external desired.Route
}

// routes returns sp's routes to render, recording in cfg.err a cluster-IP
// route the rules cannot express.
func (cfg *renderConfig) routes(sp *desired.ServicePort) portRoutes {
	r := cfg.routesOf(sp)
	out := portRoutes{clusterIP: r[desired.ClusterIPPath][desired.FromOutside], external: r[desired.ExternalPath][desired.FromOutside]}
	for _, src := range desired.Sources {
		route := r[desired.ClusterIPPath][src]
		if route.Set != out.clusterIP.Set || route.Masquerade != clusterIPMasquerade(cfg.masq, src) {
			cfg.fail(fmt.Errorf("%s: cannot render the cluster-IP route %+v for %s traffic: one real-server set per virtual server, "+
				"and the masquerade rules (KUBE-SERVICES) follow the State's masquerade policy", sp.Name, route, src))
		}
	}
	return out
}

// clusterIPMasquerade is what the rules renderClusterIPMasquerade writes do
// to cluster-IP traffic of source class src under m: everything with
// masqueradeAll; with a detector, all but a pod's; without one, nothing.
func clusterIPMasquerade(m desired.Masquerade, src desired.Source) bool {
	switch {
	case m.All:
		return true
	case m.Local.Mode == desired.LocalNone:
		return false
	}
	return src != desired.FromPod
}

func (cfg *renderConfig) fail(err error) {
	if cfg.err == nil {
		cfg.err = err
	}
}
