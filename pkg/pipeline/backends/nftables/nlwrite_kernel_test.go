package nftables

import (
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"

	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// listTableJSON is `nft -j list table` of family's table without handles,
// with every set's elements sorted: a hash set lists its elements in an order that depends
// on a per-set random seed, so two equal tables may list them differently.
func listTableJSON(family proxy.IPFamily) (string, error) {
	out, err := exec.Command("nft", "-j", "list", "table", string(specFor(family).family), TableName).Output()
	if err != nil {
		return "", fmt.Errorf("nft -j list table: %w", err)
	}
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return "", fmt.Errorf("decoding nft's listing: %w", err)
	}
	var lines []string
	for _, obj := range doc.Nftables {
		for kind, v := range obj {
			// Handles number objects in creation order (tables across
			// the namespace): not content. Rules are listed in order.
			delete(v, "handle")
			if elems, ok := v["elem"].([]any); ok {
				slices.SortFunc(elems, func(a, b any) int { return strings.Compare(mustJSON(a), mustJSON(b)) })
			}
			lines = append(lines, kind+" "+mustJSON(v))
		}
	}
	return strings.Join(lines, "\n"), nil
}

func sortedListing(s string) []string {
	l := strings.Split(s, "\n")
	slices.Sort(l)
	return l
}

// withElements keeps the lines of a listing that are sets or maps with
// elements.
func withElements(listing string) []string {
	var out []string
	for _, l := range strings.Split(listing, "\n") {
		if (strings.HasPrefix(l, "set ") || strings.HasPrefix(l, "map ")) && strings.Contains(l, `"elem":`) {
			out = append(out, l)
		}
	}
	return out
}

// elementCount is the number of set and map elements in a listing.
func elementCount(t *testing.T, listing string) int {
	n := 0
	for _, l := range withElements(listing) {
		var v struct {
			Elem []json.RawMessage `json:"elem"`
		}
		_, obj, _ := strings.Cut(l, " ")
		if err := json.Unmarshal([]byte(obj), &v); err != nil {
			t.Fatalf("listing line %q: %v", l, err)
		}
		n += len(v.Elem)
	}
	return n
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// programTable syncs st into an empty table of a fresh Proxier, through
// netlink element batches or nft only, in transactions of at most maxOps
// operations, and returns the table's listing.
func programTable(family proxy.IPFamily, st *desired.State, viaNetlink bool, maxOps int) (string, knft.Stats, error) {
	p, err := New(family, Options{})
	if err != nil {
		return "", knft.Stats{}, err
	}
	defer p.Close()
	if !viaNetlink {
		nft, err := knftables.New(specFor(family).family, TableName)
		if err != nil {
			return "", knft.Stats{}, err
		}
		p = NewWithInterface(family, knft.NewKnftables(nft))
	}
	p.maxOps = maxOps
	if err := p.Cleanup(context.Background()); err != nil {
		return "", knft.Stats{}, err
	}
	if err := p.Sync(context.Background(), st, proxytest.ModeOf(st)); err != nil {
		return "", knft.Stats{}, err
	}
	list, err := listTableJSON(family)
	return list, p.last, err
}

// TestNetlinkElementsMatchNft programs every shared case in both families
// once through nft only and once with element runs over netlink, and
// checks that nft lists the same table (rules, sets, every element).
func TestNetlinkElementsMatchNft(t *testing.T) {
	requireRoot(t)
	ns, err := netnstest.New(t).NewNS("nlwrite")
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range proxy.Families {
		for _, c := range proxytest.Cases() {
			st := proxytest.BuildState(t, c, family)
			err := ns.Do(func() error {
				want, _, err := programTable(family, st, false, defaultMaxOps)
				if err != nil {
					return fmt.Errorf("through nft: %w", err)
				}
				// Small transactions too: runs of elements and objects
				// alternate, and batches end mid-phase.
				for _, maxOps := range []int{defaultMaxOps, 3} {
					got, stats, err := programTable(family, st, true, maxOps)
					if err != nil {
						return fmt.Errorf("over netlink, maxOps %d: %w", maxOps, err)
					}
					if stats.NetlinkOps == 0 {
						return fmt.Errorf("maxOps %d: no element went over netlink (%+v)", maxOps, stats)
					}
					if got != want {
						return fmt.Errorf("maxOps %d: tables differ (- nft, + netlink):\n%s", maxOps, diffLines(strings.Split(want, "\n"), strings.Split(got, "\n")))
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("%s / %s: %v", family, c.Name, err)
			}
		}
	}
}

// TestNetlinkElementRejected: an element add the kernel refuses (its key
// was added behind our back with another value) fails the sync with the
// kernel's error, commits nothing of its batch, and the next sync is full
// and repairs the table. With transactions of one unit each the sync is
// many batches, each encoded while the one before is in the kernel: the
// batches after the refused one must not be sent.
func TestNetlinkElementRejected(t *testing.T) {
	requireRoot(t)
	for _, maxOps := range []int{defaultMaxOps, 1} {
		t.Run(fmt.Sprintf("maxOps=%d", maxOps), func(t *testing.T) { testNetlinkElementRejected(t, maxOps) })
	}
}

func testNetlinkElementRejected(t *testing.T, maxOps int) {
	ns, err := netnstest.New(t).NewNS("nlreject")
	if err != nil {
		t.Fatal(err)
	}
	full := caseState(t, "loadBalancerSourceRanges", proxy.IPv4)
	names := slices.SortedFunc(full.Services.Keys(), func(a, b proxy.ServicePortName) int { return strings.Compare(a.String(), b.String()) })
	late := names[len(names)-1]
	early := *full
	early.Services = full.Services
	early.Services = early.Services.Without(late)
	early.Changed = nil
	partial := *full
	partial.Changed = map[proxy.ServicePortName]struct{}{late: {}}

	err = ns.Do(func() error {
		want, _, err := programTable(proxy.IPv4, full, false, defaultMaxOps)
		if err != nil {
			return err
		}
		p, err := New(proxy.IPv4, Options{})
		if err != nil {
			return err
		}
		defer p.Close()
		p.maxOps = maxOps
		defer func() { _ = p.Cleanup(context.Background()) }()
		if err := p.Cleanup(context.Background()); err != nil {
			return err
		}
		if err := p.Sync(context.Background(), &early, proxytest.ModeOf(&early)); err != nil {
			return err
		}
		// The frontends the late service's sync adds, taken behind our
		// back with another verdict.
		cfg := newConfig(full)
		pt := renderService(cfg, full.Service(late))
		var cmds []string
		for _, e := range pt.elems {
			if e.set == mapServiceIPs {
				cmds = append(cmds, fmt.Sprintf("add element ip %s %s { %s : drop }", TableName, mapServiceIPs, spellKey(e.set, e.key)))
			}
		}
		if len(cmds) == 0 {
			return fmt.Errorf("service %s renders no %s element", late, mapServiceIPs)
		}
		for _, c := range cmds {
			if out, err := exec.Command("nft", c).CombinedOutput(); err != nil {
				return fmt.Errorf("nft %s: %v: %s", c, err, bytes.TrimSpace(out))
			}
		}
		before, err := listTableJSON(proxy.IPv4)
		if err != nil {
			return err
		}
		err = p.Sync(context.Background(), &partial, proxytest.ModeOf(&partial))
		if err == nil || !strings.Contains(err.Error(), "over netlink") {
			return fmt.Errorf("sync over a conflicting element: got %v, want a netlink batch error", err)
		}
		if p.syncs.Read() {
			return fmt.Errorf("after a failed sync the Proxier still trusts its record of the table")
		}
		after, err := listTableJSON(proxy.IPv4)
		if err != nil {
			return err
		}
		if maxOps == defaultMaxOps {
			// The batch is one kernel transaction: none of its elements
			// (the late service's endpoints, its other frontends) went
			// in; the chains and maps committed through nft before it
			// stay.
			if a, b := withElements(before), withElements(after); !slices.Equal(a, b) {
				return fmt.Errorf("the failed sync changed elements (- before, + after):\n%s", diffLines(a, b))
			}
		} else {
			// The sync only adds: exactly the batches reported committed
			// went in (the endpoints), and no frontend: the refused batch
			// is the first of the frontends (service-ips), and the
			// node-port batch encoded after it must not be sent.
			if added := elementCount(t, after) - elementCount(t, before); p.last.NetlinkOps == 0 || added != p.last.NetlinkOps {
				return fmt.Errorf("the failed sync added %d elements; the batches before the refused one hold %d", added, p.last.NetlinkOps)
			}
			frontends := func(listing string) []string {
				return slices.DeleteFunc(withElements(listing), func(l string) bool {
					return !strings.Contains(l, `"name":"`+mapServiceIPs+`"`) && !strings.Contains(l, `"name":"`+mapServiceNodePorts+`"`)
				})
			}
			if a, b := frontends(before), frontends(after); len(a) == 0 || !slices.Equal(a, b) {
				return fmt.Errorf("the failed sync changed frontends (%d lines before; - before, + after):\n%s", len(a), diffLines(a, b))
			}
		}
		// After a failure the syncer's next sync is a recovery.
		if err := p.Sync(context.Background(), &partial, proxy.RecoverySync); err != nil {
			return fmt.Errorf("retry: %w", err)
		}
		got, err := listTableJSON(proxy.IPv4)
		if err != nil {
			return err
		}
		// Objects created in another order list in another order.
		if w, g := sortedListing(want), sortedListing(got); !slices.Equal(w, g) {
			return fmt.Errorf("retry left a different table (- fresh, + repaired):\n%s", diffLines(w, g))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
