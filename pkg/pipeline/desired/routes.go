package desired

import "fmt"

// Source is how the dataplane classes the sender of a new connection. The
// classes are what the rules can tell apart: the local-traffic detector
// (Masquerade.Local) recognizes pods, the OUTPUT hook the node itself.
type Source uint8

// The source classes.
const (
	// FromOutside is anything else: another node, an off-cluster client,
	// or a pod that no detector can recognize (LocalNone).
	FromOutside Source = iota
	// FromPod is a packet the local-traffic detector calls a pod's.
	FromPod
	// FromNode is a packet the node sends itself.
	FromNode
	numSources
)

// Sources lists the source classes in order, for tables and renderers.
var Sources = [numSources]Source{FromOutside, FromPod, FromNode}

// String names the class as explain and the debug state spell it.
func (s Source) String() string {
	switch s {
	case FromPod:
		return "pod"
	case FromNode:
		return "host"
	}
	return "external"
}

// Path is a kind of frontend with routes of its own.
type Path uint8

// The paths. Node ports, external IPs and LB IPs share one: they differ
// only in how they are matched and in the LB source-range check, which
// comes before the route (ServicePort.AllowedSources).
const (
	// ClusterIPPath is traffic to the cluster IP.
	ClusterIPPath Path = iota
	// ExternalPath is traffic to node ports, external IPs and LB IPs.
	ExternalPath
	numPaths
)

// Set names one of a service port's dispatches.
type Set uint8

// The dispatches a route can choose. SetNone is the zero value: the routes
// of a ServicePort built by hand rather than by Compute (see RoutesOf).
const (
	SetNone Set = iota
	SetInternal
	SetExternal
	SetCluster
)

// String names the set as desired.ServicePort's fields do, lower case.
func (s Set) String() string {
	switch s {
	case SetInternal:
		return "internal"
	case SetExternal:
		return "external"
	case SetCluster:
		return "cluster"
	}
	return "none"
}

// Why is the policy behind a route, for explanations: a backend renders the
// route itself, never the reason.
type Why uint8

// The reasons of routes.
const (
	WhyUndecided Why = iota
	// WhyClusterIP: cluster-IP traffic keeps its source (from a pod, or no
	// detector and no masqueradeAll).
	WhyClusterIP
	// WhyMasqueradeAll: masqueradeAll masquerades all cluster-IP traffic.
	WhyMasqueradeAll
	// WhyNotPod: cluster-IP traffic the detector does not call a pod's is
	// masqueraded, so that replies come back through this node.
	WhyNotPod
	// WhyExternalCluster: externalTrafficPolicy Cluster, any endpoint,
	// masqueraded.
	WhyExternalCluster
	// WhyPodShortcut: externalTrafficPolicy Local, but a pod's traffic
	// goes to the cluster-wide endpoints, unmasqueraded.
	WhyPodShortcut
	// WhyNodeShortcut: externalTrafficPolicy Local, but the node's own
	// traffic goes to the cluster-wide endpoints, masqueraded.
	WhyNodeShortcut
	// WhyExternalLocal: externalTrafficPolicy Local, only local endpoints,
	// and the client's source address is kept.
	WhyExternalLocal
)

var whyNames = [...]string{"undecided", "cluster-ip", "masquerade-all", "not-pod", "external-cluster",
	"pod-shortcut", "node-shortcut", "external-local"}

// String names the reason in the debug state's words.
func (w Why) String() string {
	if int(w) < len(whyNames) {
		return whyNames[w]
	}
	return "undecided"
}

// ParseWhy is String's inverse; an unknown name is an error.
func ParseWhy(s string) (Why, error) {
	for i, n := range whyNames {
		if n == s {
			return Why(i), nil
		}
	}
	return WhyUndecided, fmt.Errorf("unknown route reason %q", s)
}

// ParseSet is Set.String's inverse; an unknown name is an error.
func ParseSet(s string) (Set, error) {
	for set := SetNone; set <= SetCluster; set++ {
		if set.String() == s {
			return set, nil
		}
	}
	return SetNone, fmt.Errorf("unknown dispatch set %q", s)
}

// Route is the decision for new connections of one source class on one
// path: the dispatch they use and whether they are masqueraded. A route
// reached by a packet whose source is itself an endpoint is masqueraded too
// (hairpin); that is a property of the packet, not of the route.
type Route struct {
	Set        Set
	Masquerade bool
	Why        Why
}

// Routes holds a service port's routes, by path and source class:
// r[ExternalPath][FromPod]. Where no detector exists, FromPod's routes equal
// FromOutside's, so a renderer never needs a pod match it cannot write.
type Routes [numPaths][numSources]Route

// DecideRoutes is the one place that decides who is masqueraded and which
// dispatch each source class uses (contract §5.0). Compute points every
// ServicePort at its result; it is exported for States built by hand. It
// reads only m.All, whether m has a detector, and externalLocal
// (routeTables relies on that).
//
//   - The cluster IP always uses Internal. It is masqueraded with
//     masqueradeAll, or when a detector exists and the source is not a pod.
//   - externalTrafficPolicy Cluster: External, always masqueraded.
//   - externalTrafficPolicy Local: from outside, External (the local
//     endpoints) keeping the source; from a pod (only recognizable with a
//     detector), Cluster unmasqueraded; from the node, Cluster masqueraded
//     (its source address would not route back from another node).
func DecideRoutes(m Masquerade, externalLocal bool) Routes {
	detector := m.Local.Mode != LocalNone
	var r Routes
	internal := &r[ClusterIPPath]
	internal[FromPod] = Route{Set: SetInternal, Masquerade: m.All, Why: WhyClusterIP}
	if m.All {
		internal[FromPod].Why = WhyMasqueradeAll
	}
	internal[FromOutside], internal[FromNode] = internal[FromPod], internal[FromPod]
	if detector && !m.All {
		notPod := Route{Set: SetInternal, Masquerade: true, Why: WhyNotPod}
		internal[FromOutside], internal[FromNode] = notPod, notPod
	}

	external := &r[ExternalPath]
	if !externalLocal {
		all := Route{Set: SetExternal, Masquerade: true, Why: WhyExternalCluster}
		*external = [numSources]Route{all, all, all}
		return r
	}
	external[FromOutside] = Route{Set: SetExternal, Why: WhyExternalLocal}
	external[FromPod] = external[FromOutside]
	if detector {
		external[FromPod] = Route{Set: SetCluster, Why: WhyPodShortcut}
	}
	external[FromNode] = Route{Set: SetCluster, Masquerade: true, Why: WhyNodeShortcut}
	return r
}

// RoutesOf returns sp's routes: those Compute decided, or, for a port built
// by hand, DecideRoutes' for the State's masquerade policy.
func (s *State) RoutesOf(sp *ServicePort) Routes {
	if sp.Routes != nil {
		return *sp.Routes
	}
	return DecideRoutes(s.Masquerade, sp.ExternalLocal)
}

// routeTables holds DecideRoutes' result for every input it reads
// (masqueradeAll, whether a detector exists, externalTrafficPolicy Local),
// indexed by those three as 0/1: Compute shares them between ports instead
// of storing 18 bytes in each.
var routeTables = func() (t [2][2][2]Routes) {
	for all := range 2 {
		for detector := range 2 {
			m := Masquerade{All: all == 1}
			if detector == 1 {
				m.Local.Mode = LocalCIDR
			}
			t[all][detector][0] = DecideRoutes(m, false)
			t[all][detector][1] = DecideRoutes(m, true)
		}
	}
	return t
}()

// sharedRoutes is DecideRoutes(m, externalLocal), shared (never modify it).
func sharedRoutes(m Masquerade, externalLocal bool) *Routes {
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	return &routeTables[b(m.All)][b(m.Local.Mode != LocalNone)][b(externalLocal)]
}

// Dispatch returns the dispatch a route's set names. SetNone has none: its
// zero Dispatch rejects.
func (sp *ServicePort) Dispatch(set Set) Dispatch {
	switch set {
	case SetInternal:
		return sp.Internal
	case SetExternal:
		return sp.External
	case SetCluster:
		return sp.Cluster
	}
	return Dispatch{}
}
