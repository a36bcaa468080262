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
	if bytes.Contains(legacy.save(ctx, TableMangle), []byte(hintChain)) {
		return FlavourLegacy, "kubelet's " + hintChain + " chain is in iptables-legacy"
	}
	if bytes.Contains(nft.save(ctx, TableMangle), []byte(hintChain)) {
		return FlavourNFT, "kubelet's " + hintChain + " chain is in iptables-nft"
	}
	nLegacy := countRules(legacy.save(ctx, ""))
	if nLegacy >= legacyRuleThreshold {
		return FlavourLegacy, "iptables-legacy holds rules"
	}
	if nLegacy > countRules(nft.save(ctx, "")) {
		return FlavourLegacy, "iptables-legacy holds more rules than iptables-nft"
	}
	return FlavourNFT, "default"
}

// probe saves both families' tables of one flavour.
type probe struct {
	ex      execer
	flavour Flavour
	paths   []string // iptables-X-save, ip6tables-X-save (those found)
	missing bool
}

func newProbe(ex execer, f Flavour) *probe {
	p := &probe{ex: ex, flavour: f}
	for _, name := range []string{"iptables-" + string(f) + "-save", "ip6tables-" + string(f) + "-save"} {
		if path, err := ex.LookPath(name); err == nil {
			p.paths = append(p.paths, path)
		}
	}
	p.missing = len(p.paths) == 0
	return p
}

// save returns both families' save output; errors count as empty output,
// as a family may be unsupported by the kernel.
func (p *probe) save(ctx context.Context, table Table) []byte {
	var out []byte
	for _, path := range p.paths {
		var args []string
		if table != "" {
			args = []string{"-t", string(table)}
		}
		c, cancel := context.WithTimeout(ctx, nftProbeTimeout)
		var b bytes.Buffer
		err := p.ex.Run(c, path, args, nil, &b)
		cancel()
		if err == nil {
			out = append(out, b.Bytes()...)
		}
	}
	return out
}

// countRules counts "-A" lines of iptables-save output.
func countRules(save []byte) int {
	n := 0
	for _, line := range bytes.Split(save, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("-")) {
			n++
		}
	}
	return n
}
