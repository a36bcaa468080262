package nftables

import (
	"context"
	"fmt"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The kernel applies a connection's recorded NAT (its translation, and
// the reverse one on replies) only at hooks where some nat chain of the
// family is registered, and tracks connections only while something
// needs conntrack. So a mode that serves a family without these rules
// (ebpf mode with its tc programs) keeps an empty nat chain at each of
// the rules' nat hooks, in the rules' own table: connections the rules
// translated before go on being translated until they end, and the
// connections the tc programs carry are tracked, so that the rules, if
// they come back, meet them as established flows rather than as new
// ones to translate. The table holds no rule; every mode's cleanup of the
// rules' table removes it, and the rules replace it.

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

// KeepNATHooks leaves family's table as the empty nat chains alone: the
// rules' table, when there, is replaced by them in one transaction (the
// kernel keeps the hooks registered throughout), and a table that is
// already just them is left as it is.
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
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("svcproxy: nat hooks kept for connections translated earlier; no rules")})
	for _, c := range natHookChains {
		tx.Add(&knftables.Chain{Name: c.name, Type: knftables.PtrTo(knftables.NATType),
			Hook: knftables.PtrTo(c.hook), Priority: knftables.PtrTo(c.priority)})
	}
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables %s: keeping the nat hooks: %w", family, err)
	}
	return nil
}

// onlyNATHooks says whether the table holds the nat chains and nothing
// else: no other chain, no rule, no set or map.
func onlyNATHooks(ctx context.Context, nft knftables.Interface) bool {
	chains, err := nft.List(ctx, "chains")
	if err != nil {
		return false
	}
	slices.Sort(chains)
	if len(chains) != len(natHookChains) {
		return false
	}
	for i, c := range natHookChains {
		if chains[i] != c.name {
			return false
		}
	}
	for _, kind := range []string{"sets", "maps"} {
		if objs, err := nft.List(ctx, kind); err != nil || len(objs) > 0 {
			return false
		}
	}
	rules, err := nft.ListRules(ctx, "")
	return err == nil && len(rules) == 0
}
