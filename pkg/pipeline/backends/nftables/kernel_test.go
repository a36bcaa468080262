package nftables_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernel programs both families into a real node namespace and sends
// real TCP, UDP and SCTP traffic through it.
func TestKernel(t *testing.T) {
	requireKernel(t)
	env := scenario.NewEnv(t)
	proxiers := map[proxy.IPFamily]*nftables.Proxier{}
	worlds := map[proxy.IPFamily]*scenario.World{}
	for _, f := range scenario.Families {
		worlds[f.Family] = env.NewWorld(f)
		proxiers[f.Family] = newProxier(t, env, f)
		// The hostile Services go in with the others: none may stop the sync.
		syncIn(t, env, proxiers[f.Family], worlds[f.Family].Apply(t, append(env.Services(), env.HostileServices()...)...))
	}
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			env.TrafficCases(t, f)
			t.Run("Hostile", func(t *testing.T) { env.HostileCases(t, f) })
			env.EndpointRemoved(t, f, worlds[f.Family], func(t *testing.T, st *desired.State) {
				syncIn(t, env, proxiers[f.Family], st)
			})
			t.Run("RestartRewritesNothing", func(t *testing.T) { restartRewritesNothing(t, env, f, worlds[f.Family].State()) })
		})
	}
	t.Run("cleanup", func(t *testing.T) {
		for _, f := range scenario.Families {
			if err := env.Node1.NS.Do(func() error { return proxiers[f.Family].Cleanup(context.Background()) }); err != nil {
				t.Fatalf("%s cleanup: %v", f.Family, err)
			}
		}
		tables, err := env.Node1.NS.ListTables(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(tables) != 0 {
			t.Errorf("tables left after Cleanup: %q", tables)
		}
	})
}

// restartRewritesNothing: a new Proxier given the same State must leave the
// ruleset untouched (same handles, no rule or element events) and an
// established connection working.
func restartRewritesNothing(t *testing.T, env *scenario.Env, f scenario.Fam, st *desired.State) {
	ctx := context.Background()
	env.KeepsConnection(t, f, func() {
		rulesBefore, err := listStatic(ctx, env.Node1.NS)
		if err != nil {
			t.Fatal(err)
		}
		mon, err := env.Node1.NS.StartNftMonitor()
		if err != nil {
			t.Fatal(err)
		}
		full := *st
		full.Changed = nil
		syncIn(t, env, newProxier(t, env, f), &full)
		events := mon.Stop()
		if rw := rewrites(events); len(rw) > 0 {
			t.Errorf("restart rewrote %d objects, e.g. %q", len(rw), rw[:min(len(rw), 5)])
		}
		if rulesAfter, err := listStatic(ctx, env.Node1.NS); err != nil || rulesAfter != rulesBefore {
			t.Errorf("ruleset (with handles) changed across restart (err %v):\n%s", err, diffLines(rulesBefore, rulesAfter))
		}
	})
}

// expiresField is the countdown nft prints for elements of timeout sets
// (affinity entries); it changes between two listings by itself.
var expiresField = regexp.MustCompile(` expires [0-9hms]+`)

// listStatic lists the ruleset with handles, without element countdowns.
func listStatic(ctx context.Context, ns *netnstest.NS) (string, error) {
	out, err := ns.ListRuleset(ctx)
	return expiresField.ReplaceAllString(out, ""), err
}

// rewrites returns the monitor events that touch the dataplane: anything
// on a rule or an element, and any delete or flush.
func rewrites(events []string) []string {
	var out []string
	for _, ev := range events {
		f := strings.Fields(ev)
		if len(f) >= 2 && (f[1] == "rule" || f[1] == "element" || f[0] == "delete" || f[0] == "flush") {
			out = append(out, ev)
		}
	}
	return out
}

// diffLines shows the lines only in a or only in b (enough to see what moved).
func diffLines(a, b string) string {
	inA := map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		inA[l] = true
	}
	inB := map[string]bool{}
	var out []string
	for _, l := range strings.Split(b, "\n") {
		inB[l] = true
		if !inA[l] {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range strings.Split(a, "\n") {
		if !inB[l] {
			out = append(out, "- "+l)
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... %d more", len(out)-20))
	}
	return strings.Join(out, "\n")
}
