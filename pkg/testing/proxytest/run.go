package proxytest

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Case is one world of Services and EndpointSlices and the flows traced
// through it. A flow belongs to the family of its Dest: RunFlows traces it
// against that family's State only.
type Case struct {
	Name     string
	Services []*v1.Service
	Slices   []*discoveryv1.EndpointSlice
	// Node is this node; nil means the standard node-a.
	Node *v1.Node
	// Peers are the other nodes that decapsulate direct-server-return
	// tunnels (desired.Node.Peers), their addresses taken as NodeOf takes
	// this node's; only DSRCases have any.
	Peers []*v1.Node
	// ClusterNodes are the cluster's other Nodes that are not Peers;
	// every Node's addresses and pod CIDRs (this node's, the peers', these)
	// are desired.Node.ClusterSources.
	ClusterNodes []*v1.Node
	// Options edits the standard options (StandardOptions) of each family.
	Options func(*desired.Options)
	Flows   []Flow
}

// BuildState runs c's objects through a Tracker of family, commits, and
// computes the full desired State, as the daemon's first sync would.
func BuildState(t testing.TB, c Case, family proxy.IPFamily) *desired.State {
	t.Helper()
	tracker := model.NewTracker(family)
	for _, svc := range c.Services {
		tracker.OnServiceUpdate(nil, svc)
	}
	for _, slice := range c.Slices {
		tracker.OnEndpointSliceUpdate(nil, slice)
	}
	tracker.OnServicesSynced()
	tracker.OnEndpointSlicesSynced()
	snap, changes := tracker.Commit()

	node := c.Node
	if node == nil {
		node = MakeNode(NodeName, nil)
	}
	dn := NodeOf(node)
	for _, p := range c.Peers {
		dn.Peers = append(dn.Peers, desired.Peer{Name: p.Name, IPs: NodeOf(p).IPs})
	}
	dn.ClusterSources = ClusterSourcesOf(slices.Concat([]*v1.Node{node}, c.Peers, c.ClusterNodes)...)
	opts := StandardOptions(family)
	if c.Options != nil {
		c.Options(&opts)
	}
	opts.Family = family
	return desired.Compute(nil, snap, changes, dn, opts)
}

// RunFlows traces every flow of every case of Cases with tracer, against
// the State of the flow's family, and reports each mismatch with the case
// and flow names.
func RunFlows(t *testing.T, tracer Tracer) {
	t.Helper()
	RunCases(t, Cases(), tracer)
}

// RunCases is RunFlows over cases (DSRCases: only a datapath that tunnels
// passes them).
func RunCases(t *testing.T, cases []Case, tracer Tracer) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			for _, family := range proxy.Families {
				var state *desired.State
				for _, flow := range c.Flows {
					if !family.Contains(flow.Dest) {
						continue
					}
					if state == nil {
						state = BuildState(t, c, family)
					}
					if got := tracer(t, state, flow); !got.Equal(flow.Want) {
						t.Errorf("case %q flow %q (%s %s -> %s:%d): got %s, want %s",
							c.Name, flow.Name, flow.Protocol, flow.Source, flow.Dest, flow.DestPort, got, flow.Want)
					}
				}
			}
		})
	}
}

// MapBack returns flow.Want when got is exactly what translate makes of
// it (a documented difference of the backend), else got, for RunFlows to
// compare.
func MapBack(flow Flow, got Result, translate func(Flow, Result) Result) Result {
	if got.Equal(translate(flow, flow.Want)) {
		return flow.Want
	}
	return got
}
