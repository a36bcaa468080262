package nftables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

func requireRoot(t *testing.T) { t.Helper(); netnstest.RequireKernel(t, "nft") }

// kernelSide is the read-back part of a store, printed one object per line
// so two read-backs compare with a readable diff.
func kernelSide(s *store) []string {
	out := []string{fmt.Sprintf("table present=%v", s.tablePresent)}
	for name, c := range s.chains {
		out = append(out, fmt.Sprintf("chain %s present=%v rules=%v", name, c.present, c.kernel))
	}
	for name, st := range s.sets {
		out = append(out, fmt.Sprintf("set %s present=%v map=%v", name, st.present, st.isMap))
	}
	for _, set := range s.elemSets() {
		for k, v := range s.kernelEntries(set) {
			out = append(out, fmt.Sprintf("elem %s {%s} present=true slots=%v value=%q", set, spellKey(set, k.key), k.slots, v))
		}
	}
	slices.Sort(out)
	return out
}

func readBoth(t *testing.T, family proxy.IPFamily) (viaNft, viaNetlink []string) {
	t.Helper()
	nft, err := knftables.New(specFor(family).family, TableName)
	if err != nil {
		t.Fatal(err)
	}
	k, err := knft.New(specFor(family).family, TableName)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	a, b := newStore(), newStore()
	if err := a.readBack(context.Background(), knft.NewKnftables(nft), family); err != nil {
		t.Fatalf("read-back through nft: %v", err)
	}
	if err := b.readBack(context.Background(), k, family); err != nil {
		t.Fatalf("read-back over netlink: %v", err)
	}
	return kernelSide(a), kernelSide(b)
}

func diffLines(a, b []string) string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNetlinkReadBackMatchesNft programs every shared case into a
// throwaway namespace and checks that the netlink read-back sees exactly
// what nft's JSON listing sees: chains, rule comments, sets, and every
// element in the same spelling (addresses, protocols, ports, numgen slots,
// verdicts, concatenated ranges), and that a restarted Proxier, reading
// it back in its first sync or ahead of it (ReadBack), sends nothing.
func TestNetlinkReadBackMatchesNft(t *testing.T) {
	requireRoot(t)
	ns, err := netnstest.New(t).NewNS("readback")
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range proxy.Families {
		for _, c := range proxytest.Cases() {
			st := proxytest.BuildState(t, c, family)
			err := ns.Do(func() error {
				p, err := New(family, Options{})
				if err != nil {
					return err
				}
				defer p.Close()
				// Every service port with several external frontends
				// in chains of its own, to cover that shape too.
				p.ownSlots = 0
				defer func() { _ = p.Cleanup(context.Background()) }()
				if err := p.Sync(context.Background(), st, proxytest.ModeOf(st)); err != nil {
					return err
				}
				viaNft, viaNetlink := readBoth(t, family)
				if d := diffLines(viaNft, viaNetlink); d != "" {
					return fmt.Errorf("netlink read-back differs from nft's (- nft, + netlink):\n%s", d)
				}
				if len(viaNft) < 10 {
					return fmt.Errorf("read-back saw almost nothing: %v", viaNft)
				}
				// And a restart with the same State sends nothing.
				restarted, err := New(family, Options{})
				if err != nil {
					return err
				}
				defer restarted.Close()
				restarted.ownSlots = 0
				full := *st
				full.Changed = nil
				if err := restarted.Sync(context.Background(), &full, proxytest.ModeOf(&full)); err != nil {
					return err
				}
				if n := restarted.last.Operations; n != 0 {
					return fmt.Errorf("a restart with the same State sent %d operations", n)
				}
				// Nor one that read the table back ahead (the
				// syncer's Prepare) and then syncs fully.
				ahead, err := New(family, Options{})
				if err != nil {
					return err
				}
				defer ahead.Close()
				ahead.ownSlots = 0
				if err := ahead.ReadBack(context.Background()); err != nil {
					return err
				}
				if err := ahead.Sync(context.Background(), &full, proxy.FullSync); err != nil {
					return err
				}
				if n := ahead.last.Operations; n != 0 {
					return fmt.Errorf("a restart read back ahead with the same State sent %d operations", n)
				}
				return nil
			})
			if err != nil {
				t.Errorf("%s / %s: %v", family, c.Name, err)
			}
		}
	}
}

// TestRestartOverNetlinkRepairsTampering damages a real table behind the
// Proxier's back (elements deleted and added, a chain's rules flushed) and checks that a restarted Proxier puts back exactly the
// table it had, with a handful of operations, and that a second restart
// sends nothing.
func TestRestartOverNetlinkRepairsTampering(t *testing.T) {
	requireRoot(t)
	ns, err := netnstest.New(t).NewNS("tamper")
	if err != nil {
		t.Fatal(err)
	}
	st := caseState(t, "loadBalancerSourceRanges", proxy.IPv4)
	err = ns.Do(func() error {
		p, err := New(proxy.IPv4, Options{})
		if err != nil {
			return err
		}
		defer p.Close()
		defer func() { _ = p.Cleanup(context.Background()) }()
		if err := p.Sync(context.Background(), st, proxytest.ModeOf(st)); err != nil {
			return err
		}
		want, _ := readBoth(t, proxy.IPv4)
		if err := tamper(p.store); err != nil {
			return err
		}
		if _, got := readBoth(t, proxy.IPv4); slices.Equal(got, want) {
			return fmt.Errorf("tampering changed nothing")
		}
		for i, wantOps := range []string{"a few", "none"} {
			q, err := New(proxy.IPv4, Options{})
			if err != nil {
				return err
			}
			defer q.Close()
			if err := q.Sync(context.Background(), st, proxytest.ModeOf(st)); err != nil {
				return fmt.Errorf("restart %d: %w", i+1, err)
			}
			if ops := q.last.Operations; (i == 0 && (ops == 0 || ops > 25)) || (i == 1 && ops != 0) {
				return fmt.Errorf("restart %d sent %d operations, want %s", i+1, ops, wantOps)
			}
		}
		if _, got := readBoth(t, proxy.IPv4); !slices.Equal(got, want) {
			return fmt.Errorf("not repaired:\n%s", diffLines(want, got))
		}
		// As nft sees it: a set element the read-back left out would
		// be in neither store.
		out, err := exec.Command("nft", "list", "map", "ip", TableName, mapServiceIPs).CombinedOutput()
		if err != nil || bytes.Contains(out, []byte("* : drop")) {
			return fmt.Errorf("the catch-all is still there (%v):\n%s", err, out)
		}
		out, err = exec.Command("nft", "list", "table", "ip", TableName).CombinedOutput()
		if err != nil || bytes.Contains(out, []byte(tamperedEndpoint)) {
			return fmt.Errorf("an endpoint-map element tamper added is still there (%v):\n%s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tamperedEndpoint is the value of the endpoint-map elements tamper adds.
const tamperedEndpoint = "192.0.2.7 . 80"

// tamperEndpointMap returns the nft commands that damage the first
// endpoint map of IP frontends but skip (whose element tamper deletes
// already): one of its elements deleted, and added a
// slot its rule's numgen never picks (the map's endpoint count), a
// frontend no Service has and a catch-all element, none of which render
// writes.
func tamperEndpointMap(s *store, skip string) []string {
	for _, set := range s.elemSets() {
		n, ok := endpointMapSlots(set)
		if !ok || set == skip || strings.Contains(set, "-nodeport-") {
			continue
		}
		var keys []string
		s.kernelElems(set, false, func(key, _ string) { keys = append(keys, key) })
		if len(keys) == 0 {
			continue
		}
		slices.Sort(keys)
		frontend := keys[0][:strings.LastIndex(keys[0], elemSep)]
		add := func(key string) string {
			return fmt.Sprintf("add element ip %s %s { %s : %s }", TableName, set, key, tamperedEndpoint)
		}
		return []string{
			fmt.Sprintf("delete element ip %s %s { %s }", TableName, set, keys[0]),
			add(fmt.Sprintf("%s . %d", frontend, n)),
			add("192.0.2.50 . tcp . 9 . 0"),
			add("*"),
		}
	}
	return nil
}

// tamper deletes, with the nft binary, one element of the largest map, one
// allow set's range, one firewall guard and the rules of one chain, and
// adds a range (no prefix), a guard and a catch-all element that render
// never writes; and damages an endpoint map (tamperEndpointMap).
func tamper(s *store) error {
	var cmds []string
	sets := s.elemSets()
	slices.SortStableFunc(sets, func(a, b string) int { return int(s.elemCount(b)) - int(s.elemCount(a)) })
	allowSet := firewallAllowSet(proxy.TCP)
	for _, p := range firewallProtocols {
		if s.elemCount(firewallAllowSet(p)) > 0 {
			allowSet = firewallAllowSet(p)
			break
		}
	}
	for _, set := range []string{sets[0], allowSet, setFirewallGuards} {
		var keys []string
		s.kernelElems(set, false, func(key, _ string) { keys = append(keys, key) })
		if len(keys) > 0 {
			cmds = append(cmds, fmt.Sprintf("delete element ip %s %s { %s }", TableName, set, keys[0]))
		}
	}
	// A range that is no prefix, read back as data as any other.
	for k := range s.kernelEntries(allowSet) {
		f := strings.Split(spellKey(allowSet, k.key), " . ")
		f[len(f)-1] = "192.0.2.1-192.0.2.3"
		cmds = append(cmds, fmt.Sprintf("add element ip %s %s { %s }", TableName, allowSet, strings.Join(f, " . ")))
		break
	}
	cmds = append(cmds, fmt.Sprintf("add element ip %s %s { 192.0.2.99 . udp . 81 }", TableName, setFirewallGuards))
	cmds = append(cmds, tamperEndpointMap(s, sets[0])...)
	// A catch-all element: read back with no key (data of none).
	cmds = append(cmds, fmt.Sprintf("add element ip %s %s { * : drop }", TableName, mapServiceIPs))
	cmds = append(cmds, fmt.Sprintf("flush chain ip %s %s", TableName, chainMasquerading))
	for _, c := range cmds {
		if out, err := exec.Command("nft", c).CombinedOutput(); err != nil {
			return fmt.Errorf("nft %s: %v: %s", c, err, out)
		}
	}
	return nil
}

// TestRestartOverNetlinkRemovesWhatWentAway: Services deleted while the
// daemon was down leave their objects in the kernel; the restart must find
// them by reading the table and delete them, ending with exactly the table
// a fresh start would program.
func TestRestartOverNetlinkRemovesWhatWentAway(t *testing.T) {
	requireRoot(t)
	ns, err := netnstest.New(t).NewNS("gone")
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range proxy.Families {
		before := caseState(t, "session affinity", family)
		after := caseState(t, "cluster IP", family)
		err := ns.Do(func() error {
			p, err := New(family, Options{})
			if err != nil {
				return err
			}
			defer p.Close()
			defer func() { _ = p.Cleanup(context.Background()) }()
			if err := p.Sync(context.Background(), after, proxytest.ModeOf(after)); err != nil {
				return err
			}
			want, _ := readBoth(t, family)
			if err := p.Sync(context.Background(), before, proxytest.ModeOf(before)); err != nil {
				return err
			}
			q, err := New(family, Options{})
			if err != nil {
				return err
			}
			defer q.Close()
			if err := q.Sync(context.Background(), after, proxytest.ModeOf(after)); err != nil {
				return fmt.Errorf("restart: %w", err)
			}
			if _, got := readBoth(t, family); !slices.Equal(got, want) {
				return fmt.Errorf("restart left a different table than a fresh start (- fresh, + restarted):\n%s", diffLines(want, got))
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", family, err)
		}
	}
}
