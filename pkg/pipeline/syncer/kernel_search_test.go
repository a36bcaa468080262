package syncer_test

import (
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/faultinject"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/quarantinetest"
)

// TestKernelSearchCostIPTables: the tools a quarantine search runs in
// iptables mode, when a poison and a healthy Service arrive in one partial
// sync. iptables-restore refuses the poison's rule before its first COMMIT,
// so no rejected attempt applies anything: the search reads nat back
// never, ensures the canaries and jumps (a full sync) once, for its base,
// with a single listing that finds them in place, and tries everything
// else with partial restores.
func TestKernelSearchCostIPTables(t *testing.T) {
	netnstest.RequireKernel(t, "iptables-nft-restore", "iptables-nft-save")
	execs := netnstest.RecordExecs(t, netnstest.ProxyTools()...)
	env := scenario.NewEnv(t)
	f := scenario.Families[0]
	w := env.NewWorld(f)
	w.Feed(env.Services()...)
	fi := faultinject.Wrap(backendFor(t, env, proxy.ModeIPTables, f), proxy.ModeIPTables, f.Family)
	var quarantined []proxy.ServicePortName
	s := quarantinetest.NewSyncer(t, w, f, fi, &quarantined)
	if err := env.Node1.NS.Do(s.SyncOnce); err != nil {
		t.Fatal(err)
	}
	late := scenario.Spec{Name: "late", Slot: 38, Endpoints: []scenario.EPSpec{{Pod: "pod-b"}}}
	w.Feed(quarantinetest.Poison, late)
	ran := execs.Runs(t, env.Node1.NS, s.SyncOnce)
	if fi.Refused == 0 || len(quarantined) != len(scenario.Protocols) {
		t.Fatalf("refused %d syncs, quarantined %v: want the poison's %d ports found", fi.Refused, quarantined, len(scenario.Protocols))
	}
	var restores, listings, fulls, calls int
	for _, run := range ran {
		switch tool := strings.Fields(run)[0]; {
		case strings.HasSuffix(tool, "-restore") && !strings.Contains(run, "--counters"):
			// Every full sync lists its jumps (and creates the
			// canaries) with one restore that writes no counters.
			fulls++
		case strings.HasSuffix(tool, "-restore"):
			restores++
		case strings.HasSuffix(tool, "-save"):
			listings++
		default:
			calls++
		}
	}
	t.Logf("search: %d restores (%d refused), %d full syncs, %d listings, %d single-rule calls", restores, fi.Refused, fulls, listings, calls)
	if listings != 0 || fulls != 1 {
		t.Errorf("the search listed nat %d times and made %d full syncs, want 0 and 1 (its base):\n%s", listings, fulls, strings.Join(ran, "\n"))
	}
	// That full sync found its canaries and jumps in place with its one
	// listing: nothing is checked or added one call at a time.
	if calls != 0 {
		t.Errorf("the search made %d single-rule calls, want none:\n%s", calls, strings.Join(ran, "\n"))
	}
	if err := quarantinetest.AskFromPodC(env, f, late.Slot); err != nil {
		t.Errorf("the healthy Service that came with the poison does not answer: %v", err)
	}
	quarantinetest.QuarantinedAnswers(t, env, f)
}
