package debugstate

import (
	"fmt"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// Routes is desired.Routes: the daemon's own decisions, carried so that
// `svcproxy explain` (perhaps another build) applies them instead of
// deciding again. Absent (an older daemon), the reader decides them.
type Routes struct {
	ClusterIP PathRoutes `json:"clusterIP"`
	External  PathRoutes `json:"external"`
}

// PathRoutes are one path's routes by source class.
type PathRoutes struct {
	Outside Route `json:"outside"`
	Pod     Route `json:"pod"`
	Node    Route `json:"node"`
}

// Route is desired.Route: Set is internal, external or cluster; Why is
// desired.Why's name.
type Route struct {
	Set        string `json:"set"`
	Masquerade bool   `json:"masquerade"`
	Why        string `json:"why"`
}

func encodeRoutes(r *desired.Routes) *Routes {
	if r == nil {
		return nil
	}
	path := func(p desired.Path) PathRoutes {
		route := func(s desired.Source) Route {
			x := r[p][s]
			return Route{Set: x.Set.String(), Masquerade: x.Masquerade, Why: x.Why.String()}
		}
		return PathRoutes{Outside: route(desired.FromOutside), Pod: route(desired.FromPod), Node: route(desired.FromNode)}
	}
	return &Routes{ClusterIP: path(desired.ClusterIPPath), External: path(desired.ExternalPath)}
}

func (w *Routes) decode() (*desired.Routes, error) {
	if w == nil {
		return nil, nil
	}
	out := &desired.Routes{}
	for p, pr := range map[desired.Path]PathRoutes{desired.ClusterIPPath: w.ClusterIP, desired.ExternalPath: w.External} {
		for s, r := range map[desired.Source]Route{desired.FromOutside: pr.Outside, desired.FromPod: pr.Pod, desired.FromNode: pr.Node} {
			set, err := desired.ParseSet(r.Set)
			if err != nil {
				return nil, fmt.Errorf("%s route from %s: %w", r.Set, s, err)
			}
			why, err := desired.ParseWhy(r.Why)
			if err != nil {
				return nil, fmt.Errorf("%s route from %s: %w", r.Set, s, err)
			}
			out[p][s] = desired.Route{Set: set, Masquerade: r.Masquerade, Why: why}
		}
	}
	return out, nil
}
