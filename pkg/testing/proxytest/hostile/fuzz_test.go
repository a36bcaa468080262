// Package hostile fuzzes the whole path from API objects to every
// backend's kernel objects with adversarial Services and EndpointSlices
// whatever a tenant writes, each backend's sync must succeed
// and every element it programs must fit its set's type.
package hostile

import (
	"context"
	"flag"
	"io"
	"net/netip"
	"os"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// FuzzHostileServices builds two batches of objects from the input, feeds
// the first, then the second as updates, through a Tracker and Compute for
// both families, and syncs each State (full, then incremental) into the
// fakes of the nftables, iptables and IPVS backends, checking the State's
// invariants and every backend's output after each sync.
func FuzzHostileServices(f *testing.F) {
	for _, seed := range seeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{data: data}
		first := g.world()
		second := g.world()
		for _, family := range proxy.Families {
			runFamily(t, family, first, second, fakeBackends(family))
		}
	})
}

// backend is one backend under test with its fake kernel; check inspects
// the fake after a successful sync.
type backend struct {
	name  string
	sync  func(*desired.State) error
	check func(t reporter, st *desired.State)
}

// fakeBackends is every backend on its fake kernel.
func fakeBackends(family proxy.IPFamily) []backend {
	return []backend{newNFT(family), newIPT(family), newIPVS(family)}
}

func runFamily(t *testing.T, family proxy.IPFamily, first, second world, backends []backend) {
	t.Helper()
	tracker := model.NewTracker(family)
	opts := proxytest.StandardOptions(family)
	var state *desired.State
	for step, w := range []world{first, second} {
		apply(tracker, step, first, w)
		snap, changes := tracker.Commit()
		node := nodeAt(step)
		state = desired.Compute(state, snap, changes, node, opts)
		checkState(t, state, node.ClusterNodeIPs)
		checkLostAsFull(t, state, desired.Compute(nil, snap, changes, node, opts))
		for _, b := range backends {
			if err := b.sync(state); err != nil {
				t.Fatalf("%s %s sync %d: %v", b.name, family, step, err)
			}
			b.check(t, state)
		}
	}
}

// nodeAt is this node as the step sees it. The daemon watches every Node
// (--watch-node-addresses); at step 1 another Node joins, whose addresses
// the tenants' external and LB IPs may name (frontendIPs): the
// incremental Compute must refuse them as a full one does.
func nodeAt(step int) desired.Node {
	node := proxytest.NodeOf(proxytest.MakeNode(proxytest.NodeName, nil))
	cluster := slices.Clone(node.IPs)
	if step > 0 {
		other := proxytest.NodeOf(proxytest.MakeNode(proxytest.OtherNodeName, nil))
		cluster = append(cluster, other.IPs...)
	}
	slices.SortFunc(cluster, netip.Addr.Compare)
	node.ClusterNodeIPs = cluster
	return node
}

// apply feeds w to the tracker: at step 0 as new objects, then as updates
// of first's objects by position (extra ones added, missing ones deleted).
func apply(tr *model.Tracker, step int, first, w world) {
	var prevSvcs []*v1.Service
	var prevSlices []*discoveryv1.EndpointSlice
	if step > 0 {
		prevSvcs, prevSlices = first.services, first.slices
	}
	for i := range max(len(prevSvcs), len(w.services)) {
		old, cur := at(prevSvcs, i), at(w.services, i)
		if old != nil && cur != nil && !sameObject(old.ObjectMeta, cur.ObjectMeta) {
			tr.OnServiceUpdate(old, nil) // an informer sees another object: delete, add
			old = nil
		}
		tr.OnServiceUpdate(old, cur)
	}
	for i := range max(len(prevSlices), len(w.slices)) {
		old, cur := at(prevSlices, i), at(w.slices, i)
		if old != nil && cur != nil && !sameObject(old.ObjectMeta, cur.ObjectMeta) {
			tr.OnEndpointSliceUpdate(old, nil)
			old = nil
		}
		tr.OnEndpointSliceUpdate(old, cur)
	}
}

func sameObject(a, b metav1.ObjectMeta) bool { return a.Namespace == b.Namespace && a.Name == b.Name }

func at[T any](list []*T, i int) *T {
	if i < len(list) {
		return list[i]
	}
	return nil
}

var ctx = context.Background()

// TestMain silences klog: the tracker logs every hostile field it ignores.
func TestMain(m *testing.M) {
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	_ = flags.Set("logtostderr", "false")
	_ = flags.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// reporter is what the checks need of a *testing.T; TestChecksCatch passes
// a recorder to see them fail.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}
