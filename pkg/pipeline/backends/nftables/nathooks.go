package nftables

import (
	"context"
	"fmt"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The kernel applies a connection's recorded NAT (its translation, and
// the reverse one on replies) only at hooks where some nat chain of the
// family is registered, and only to packets it tracks. It tracks a
// family's packets only while something in the namespace needs conntrack
// (a rule matching on conntrack state, a nat statement; a nat chain does
// not count): when the last such rule goes, the kernel unregisters the
// family's conntrack hooks, and although every entry stays in the table,
// no packet is matched to it any more, so no translation is applied. A
// packet a client sends to a node port then reaches the node's own stack,
// which has no socket there and resets the connection. So a mode that
// serves a family without these rules (ebpf mode with its tc programs)
// keeps, in the rules' own table, an empty nat chain at each of the
// rules' nat hooks and one rule that needs conntrack, in a chain no
// packet enters: connections the rules translated before go on being
// translated until they end, and the connections the tc programs carry
// are tracked meanwhile. The mode keeps them even where these rules never
// ran: another mode's rules (iptables mode's), removed once the mode has
// synced, may have translated connections, and leave nothing else that
// needs conntrack. Once no connection the kernel translates is left, the
// mode empties the table (EmptyKeptNATHooks), and the kernel stops
// tracking connections nothing else needs tracked. Every mode's cleanup
// of the rules' table removes it, and the rules replace it.

// natHookChains are the rules' nat base chains (render's), by hook.
var natHookChains = []struct {
	name     string
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}{
	{"nat-output", knftables.OutputHook, knftables.DNATPriority},
	{"nat-postrouting", knftables.PostroutingHook, knftables.SNATPriority},
	{"nat-prerouting", knftables.PreroutingHook, knftables.DNATPriority},
}

// conntrackChain holds the one rule that keeps the family's conntrack
// hooks registered; nothing jumps to it, so it costs no packet anything.
const conntrackChain = "keep-conntrack"

// keptChains are the chains of a kept table, sorted as nft lists them.
var keptChains = func() []string {
	names := []string{conntrackChain}
	for _, c := range natHookChains {
		names = append(names, c.name)
	}
	slices.Sort(names)
	return names
}()

// WithoutRules says whether family's table is what KeepNATHooks leaves,
// or what EmptyKeptNATHooks leaves of that, so that another packet path
// (the tc programs) serves the family's Services; false without the
// table, or when it cannot tell.
func WithoutRules(family proxy.IPFamily) bool {
	if ok, err := knft.TableExists(specFor(family).family, TableName); err != nil || !ok {
		return false
	}
	chains, err := knft.ChainNames(specFor(family).family, TableName)
	return err == nil && (len(chains) == 0 || slices.Contains(chains, conntrackChain))
}

// KeepNATHooks leaves family's table as the empty nat chains and the
// conntrack rule alone, creating them where there is no table. The
// rules' table is replaced by them in one transaction (the kernel keeps
// the nat and conntrack hooks registered throughout: the new chains and
// rule take their references before the old ones release theirs), and a
// table that is already just them is left as it is.
func KeepNATHooks(ctx context.Context, family proxy.IPFamily) error {
	nft, err := knftables.New(specFor(family).family, TableName)
	if err != nil {
		return fmt.Errorf("nftables %s: %w", family, err)
	}
	if onlyNATHooks(ctx, nft) {
		return nil
	}
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("svcproxy: nat and conntrack hooks kept for connections translated earlier; no Service rules")})
	for _, c := range natHookChains {
		tx.Add(&knftables.Chain{Name: c.name, Type: knftables.PtrTo(knftables.NATType),
			Hook: knftables.PtrTo(c.hook), Priority: knftables.PtrTo(c.priority)})
	}
	tx.Add(&knftables.Chain{Name: conntrackChain})
	tx.Add(&knftables.Rule{Chain: conntrackChain, Rule: "ct state new",
		Comment: knftables.PtrTo("never runs: keeps connection tracking on for connections translated earlier")})
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables %s: keeping the nat hooks: %w", family, err)
	}
	return nil
}

// EmptyKeptNATHooks empties family's table when it is what KeepNATHooks
// leaves, once the caller knows no connection the rules translated is
// left: a table without chains holds nothing that needs conntrack, so the
// kernel stops tracking the family's connections unless something else
// needs it, and the table, its comment saying so, marks the family as
// served without rules (WithoutRules). It reports whether the table is
// empty or absent; a table that holds anything else (rules another start
// wrote) is left alone.
func EmptyKeptNATHooks(ctx context.Context, family proxy.IPFamily) (bool, error) {
	chains, err := knft.ChainNames(specFor(family).family, TableName)
	if err != nil {
		return false, err
	}
	if len(chains) == 0 {
		return true, nil
	}
	nft, err := knftables.New(specFor(family).family, TableName)
	if err != nil {
		return false, fmt.Errorf("nftables %s: %w", family, err)
	}
	if !onlyNATHooks(ctx, nft) {
		return false, nil
	}
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("svcproxy: no Service rules; the tc programs serve this family")})
	if err := nft.Run(ctx, tx); err != nil {
		return false, fmt.Errorf("nftables %s: emptying the kept nat hooks: %w", family, err)
	}
	return true, nil
}

// onlyNATHooks says whether the table holds the kept chains and nothing
// else: no other chain, no set or map, one rule, in the conntrack chain.
func onlyNATHooks(ctx context.Context, nft knftables.Interface) bool {
	chains, err := nft.List(ctx, "chains")
	if err != nil {
		return false
	}
	slices.Sort(chains)
	if !slices.Equal(chains, keptChains) {
		return false
	}
	for _, kind := range []string{"sets", "maps"} {
		if objs, err := nft.List(ctx, kind); err != nil || len(objs) > 0 {
			return false
		}
	}
	rules, err := nft.ListRules(ctx, "")
	return err == nil && len(rules) == 1 && rules[0].Chain == conntrackChain
}
