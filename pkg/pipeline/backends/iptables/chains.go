package iptables

import (
	"context"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// owner is who claims chains: a service port, named by the hash its own
// chains' names end in (unique per port, as the names are), or "" for the
// shared chains. Every claim holds its owner, and the hash is much
// smaller than the port's name.
type owner string

// Compare orders owners for the engine (no two ports claim one chain).
func (o owner) Compare(other owner) int { return strings.Compare(string(o), string(other)) }

// ownerOf is the owner a port's chains are claimed by.
func ownerOf(pn portNames) owner { return owner(pn.svc[len(prefixSVC):]) }

// The restore input is one transaction per table, so the phases are the
// order of its text (assemble): a port's own chains are declared and
// filled before the top-level rules that jump to them, and the chains to
// delete are flushed before those rules and deleted after them, once
// nothing jumps to them any more.
const (
	phaseChains = iota
	phaseTopRules
	phaseChainsGone
)

// chainKind is a port's own nat chain (SVC, SVL, EXT, FW, SEP), keyed by
// name. Its text is not kept (it is most of a large sync's input): a
// chain that a sync claims was rendered by it and is written, so no
// claimed chain equals the kernel's copy, and a partial sync touches only
// the changed ports' chains.
var chainKind = reconcile.Kind[string, struct{}]{
	Name:  "nat chain",
	Equal: func(struct{}, struct{}) bool { return false },

	AddPhase: phaseChains, UpdatePhase: phaseChains, DeletePhase: phaseChainsGone,
}

// sharedText is a part of the input that every port adds rules to and
// that is written whole: nat's top-level chains, and our filter chains.
type sharedText uint8

const (
	natTop sharedText = iota
	filterAll
)

// sharedKind is a shared text, valued by the hash of its rules (the text
// grows with every port): a partial sync writes it only when the hash
// changed, and an endpoint change alters neither.
var sharedKind = reconcile.Kind[sharedText, uint64]{
	Name:  "shared chains",
	Equal: func(want, have uint64) bool { return want == have },

	AddPhase: phaseTopRules, UpdatePhase: phaseTopRules, DeletePhase: phaseTopRules,
}

// store is what the Proxier knows of the kernel's chains, as the
// reconcile engine keeps it.
type store struct {
	syncs  reconcile.Syncs
	chains *reconcile.Table[owner, string, struct{}]
	shared *reconcile.Table[owner, sharedText, uint64]
}

func newStore() store {
	return store{chains: reconcile.NewTable[owner](chainKind), shared: reconcile.NewTable[owner](sharedKind)}
}

// readBack fills the chain table's kernel side with the service chains
// of nat, for the diff to delete those nobody claims: chains left by an
// earlier run, a failed sync, or a port removed while we were down. It
// takes natChains when ensureJumps read them (iptables-legacy), else
// lists the chain names (iptables-save); in large-cluster mode, where
// that listing may take seconds, it does so at most once per SyncPeriod
// and otherwise keeps the record of what this process committed. It runs
// before the restore, which must not change what it reads. A failed
// listing is logged: the stale chains stay until the next read-back,
// while what this sync writes is recorded as it commits.
func (p *Proxier) readBack(ctx context.Context, largeCluster bool, natChains []string) {
	defer p.store.syncs.ReadDone()
	now := p.opts.Now()
	names := natChains
	if names == nil {
		if largeCluster && now.Sub(p.lastSweep) < p.opts.SyncPeriod {
			return
		}
		var err error
		if names, err = p.ipt.ChainNames(ctx, kiptables.TableNAT); err != nil {
			klog.ErrorS(err, "Listing nat chains failed; stale chains are not deleted this time", "ipFamily", p.family)
			return
		}
	}
	p.lastSweep = now
	p.store.chains.ForgetKernel()
	for _, name := range names {
		if isServiceChain(name) {
			p.store.chains.SetKernel(name, struct{}{})
		}
	}
}

// claimChains makes the chains r.chains names the claims of port. The
// chain table is counted, so it keeps none of the items: the next port
// renders into the same slice.
func (s *store) claimChains(port owner, r *renderer) {
	s.chains.Replace(port, r.chains)
	r.chains = r.chains[:0]
}

// chainDiff is the chain table's changes as the input uses them: the
// chains deleted, by name (the render wrote the others' text), and where
// each changed chain's entry is, to commit it once the restore succeeded.
// A position is a sixth of a change's size, and a full sync changes every
// chain and holds the record while iptables-restore runs.
type chainDiff struct {
	at      []reconcile.Pos
	deleted []string
}

func (s *store) diffChains() chainDiff {
	var d chainDiff
	s.chains.DiffFunc(func(c reconcile.Change[string, struct{}], at reconcile.Pos) {
		d.at = append(d.at, at)
		if c.Op == reconcile.Delete {
			d.deleted = append(d.deleted, c.Key)
		}
	})
	slices.Sort(d.deleted)
	return d
}

// commitChains records that the kernel made every change of d.
func (s *store) commitChains(d chainDiff) {
	for _, at := range d.at {
		s.chains.CommitAt(at)
	}
}

// diffShared claims the shared texts' hashes and reports which of them
// the input must hold.
func (s *store) diffShared(sums [2]uint64) (changes []reconcile.Change[sharedText, uint64], write [2]bool) {
	s.shared.Replace("", []reconcile.Item[sharedText, uint64]{{Key: natTop, Value: sums[natTop]}, {Key: filterAll, Value: sums[filterAll]}})
	changes = s.shared.Diff()
	for _, c := range changes {
		write[c.Key] = true
	}
	return changes, write
}
