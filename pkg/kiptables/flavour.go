package kiptables

import (
	"bytes"
	"context"
	"time"

	"k8s.io/klog/v2"
)

// Flavour is which iptables implementation a client drives.
type Flavour string

// The iptables flavours. The node's flavour must be used: rules written by
// the other one are invisible to kubelet and the CNI plugin and fight with
// theirs.
const (
	FlavourNFT    Flavour = "nft"
	FlavourLegacy Flavour = "legacy"
)

// hintChain is the empty mangle chain kubelet creates to tell containers
// which flavour the host uses.
const hintChain = "KUBE-IPTABLES-HINT"

// legacyRuleThreshold: with at least this many legacy rules the host is
// clearly using legacy, whatever nft shows (iptables-wrapper's rule).
const legacyRuleThreshold = 10

// nftProbeTimeout bounds each nft save: some iptables-nft releases can hang.
const nftProbeTimeout = 5 * time.Second

// DetectFlavour picks the flavour the host uses, as the iptables-wrapper
// of upstream's image does: kubelet's KUBE-IPTABLES-HINT chain decides if
// present (legacy first); otherwise the flavour with more rules wins, with
// legacy chosen outright at 10 or more rules, and nft by default. A flavour
// whose tools are missing is never chosen. The choice is logged.
func DetectFlavour(ctx context.Context) Flavour {
	f, why := detectFlavour(ctx, osExec{})
	klog.InfoS("Using iptables flavour", "flavour", f, "reason", why)
	return f
}

// detectFlavour runs at every start, so on a node where we (or
// kube-proxy) already wrote 10k services it reads no more of those rules
// than it needs: iptables-nft-save of any table fetches every rule of
// every table (3 s and a 280 MB child at 10k × 10), and the whole ruleset
// (36 MB) was read into memory to count its rules. So iptables-nft is
// asked for the hint chain alone (probe.hasChain), rules are counted as
// the save streams by, and iptables-nft's only when iptables-legacy has
// some (nft cannot hold fewer than none).
func detectFlavour(ctx context.Context, ex execer) (Flavour, string) {
	legacy := newProbe(ex, FlavourLegacy)
	nft := newProbe(ex, FlavourNFT)
	switch {
	case legacy.missing && nft.missing:
		return FlavourNFT, "no flavoured tools found; defaulting to nft"
	case legacy.missing:
		return FlavourNFT, "iptables-legacy tools not installed"
	case nft.missing:
		return FlavourLegacy, "iptables-nft tools not installed"
	}
	if legacy.hasChain(ctx, TableMangle, hintChain) {
		return FlavourLegacy, "kubelet's " + hintChain + " chain is in iptables-legacy"
	}
	if nft.hasChain(ctx, TableMangle, hintChain) {
		return FlavourNFT, "kubelet's " + hintChain + " chain is in iptables-nft"
	}
	nLegacy := legacy.countRules(ctx)
	if nLegacy >= legacyRuleThreshold {
		return FlavourLegacy, "iptables-legacy holds rules"
	}
	if nLegacy > 0 && nLegacy > nft.countRules(ctx) {
		return FlavourLegacy, "iptables-legacy holds more rules than iptables-nft"
	}
	return FlavourNFT, "default"
}

// probe reads both families' tables of one flavour with its tools.
type probe struct {
	ex      execer
	flavour Flavour
	paths   []string // iptables-X-save, ip6tables-X-save (those found)
	lists   []string // iptables-X, ip6tables-X (those found)
	missing bool
}

func newProbe(ex execer, f Flavour) *probe {
	p := &probe{ex: ex, flavour: f}
	for _, fam := range []string{"iptables-", "ip6tables-"} {
		if path, err := ex.LookPath(fam + string(f) + "-save"); err == nil {
			p.paths = append(p.paths, path)
		}
		if path, err := ex.LookPath(fam + string(f)); err == nil {
			p.lists = append(p.lists, path)
		}
	}
	p.missing = len(p.paths) == 0
	return p
}

// scan passes each line of both families' save output of table ("": all
// tables) to fn as it is read; errors count as no output, as a family may
// be unsupported by the kernel.
func (p *probe) scan(ctx context.Context, table Table, fn func(line []byte)) {
	for _, path := range p.paths {
		var args []string
		if table != "" {
			args = []string{"-t", string(table)}
		}
		c, cancel := context.WithTimeout(ctx, nftProbeTimeout)
		lw := &lineWriter{fn: fn}
		if err := p.ex.Run(c, path, args, nil, lw); err == nil {
			lw.done()
		}
		cancel()
	}
}

// hasChain reports whether either family's table declares chain.
// iptables-nft lists the one chain (a single iptables-nft call fetches
// only the chains it names: milliseconds); iptables-legacy's save is read,
// as a legacy listing would wait for the xtables lock.
func (p *probe) hasChain(ctx context.Context, table Table, chain string) bool {
	if p.flavour == FlavourNFT {
		for _, path := range p.lists {
			c, cancel := context.WithTimeout(ctx, nftProbeTimeout)
			err := p.ex.Run(c, path, []string{"-t", string(table), "-L", chain, "-n"}, nil, nil)
			cancel()
			if err == nil {
				return true
			}
		}
		return false
	}
	found := false
	p.scan(ctx, table, func(line []byte) {
		if name, ok := bytes.CutPrefix(line, []byte(":")); ok {
			name, _, _ = bytes.Cut(name, []byte(" "))
			found = found || string(name) == chain
		}
	})
	return found
}

// countRules counts the "-A" lines of both families' tables.
func (p *probe) countRules(ctx context.Context) int {
	n := 0
	p.scan(ctx, "", func(line []byte) {
		if bytes.HasPrefix(line, []byte("-")) {
			n++
		}
	})
	return n
}
