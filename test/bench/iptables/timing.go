package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"regexp"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

// OpStat sums the calls of one kind an operation made to iptables: wall
// time, and the CPU of the child processes (iptables-restore, -save,
// iptables) those calls ran. Their system time is where the kernel does the
// work: iptables-nft's netlink batches are processed in the sender's
// context, iptables-legacy's table replacement in its setsockopt.
type OpStat struct {
	Calls       int     `json:"calls"`
	WallMS      float64 `json:"wall_ms"`
	ChildUserMS float64 `json:"child_user_ms"`
	ChildSysMS  float64 `json:"child_sys_ms"`
	InBytes     int     `json:"in_bytes"` // restore input
}

// timedIPT is a kiptables.Interface that times every call of the real
// client it wraps. Calls are sequential (one Proxier), so the deltas of
// RUSAGE_CHILDREN around a call belong to it.
type timedIPT struct {
	kiptables.Interface
	ops  map[string]*OpStat
	heap *heapProfiler // nil unless -heapprofile
}

func newTimedIPT(ipt kiptables.Interface, heap *heapProfiler) *timedIPT {
	return &timedIPT{Interface: ipt, ops: map[string]*OpStat{}, heap: heap}
}

// take returns the calls recorded since the last take and starts afresh.
func (t *timedIPT) take() map[string]OpStat {
	out := map[string]OpStat{}
	for k, v := range t.ops {
		out[k] = *v
	}
	t.ops = map[string]*OpStat{}
	return out
}

func (t *timedIPT) timed(op string, in int, fn func() error) error {
	times, err := benchkit.Measure(fn)
	s := t.ops[op]
	if s == nil {
		s = &OpStat{}
		t.ops[op] = s
	}
	s.Calls++
	s.WallMS += times.WallMS
	s.ChildUserMS += times.ChildUserMS
	s.ChildSysMS += times.ChildSysMS
	s.InBytes += in
	return err
}

func (t *timedIPT) Restore(ctx context.Context, data ...[]byte) error {
	size := 0
	for _, c := range data {
		size += len(c)
	}
	t.heap.at("restore")
	return t.timed("restore", size, func() error { return t.Interface.Restore(ctx, data...) })
}

// RestoreFrom times a streamed restore: its wall time includes rendering
// the input, which runs while the tool reads it.
// The heap profile is taken once the input is written, when what the
// sync rendered is all live.
func (t *timedIPT) RestoreFrom(ctx context.Context, write func(io.Writer) error) error {
	var size countingWriter
	err := t.timed("restore", 0, func() error {
		return t.Interface.RestoreFrom(ctx, func(w io.Writer) error {
			size.w, size.n = w, 0
			err := write(&size)
			t.heap.at("restore")
			return err
		})
	})
	t.ops["restore"].InBytes += size.n
	return err
}

// countingWriter counts the bytes it passes to w.
type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

func (t *timedIPT) Save(ctx context.Context, table kiptables.Table) (out []byte, err error) {
	err = t.timed("save", 0, func() error {
		out, err = t.Interface.Save(ctx, table)
		return err
	})
	t.heap.at("save-" + string(table))
	return out, err
}

// ChainNames counts as a save: it is what the stale-chain sweep reads
// (an iptables-save).
func (t *timedIPT) ChainNames(ctx context.Context, table kiptables.Table) (names []string, err error) {
	err = t.timed("save", 0, func() error {
		names, err = t.Interface.ChainNames(ctx, table)
		return err
	})
	t.heap.at("chainnames-" + string(table))
	return names, err
}

// ListEnsuring is a full sync's read of its canaries and jumps on
// iptables-nft: an iptables-restore run of its own, timed apart from the
// restore that programs the rules.
func (t *timedIPT) ListEnsuring(ctx context.Context, req []kiptables.ListRequest) (out map[kiptables.Table][]byte, err error) {
	err = t.timed("listing", 0, func() error {
		out, err = t.Interface.ListEnsuring(ctx, req)
		return err
	})
	return out, err
}

// MissingChain is the canary poll's listing.
func (t *timedIPT) MissingChain(ctx context.Context, chain string, tables []kiptables.Table) (missing kiptables.Table, err error) {
	err = t.timed("listing", 0, func() error {
		missing, err = t.Interface.MissingChain(ctx, chain, tables)
		return err
	})
	return missing, err
}

func (t *timedIPT) EnsureChain(ctx context.Context, table kiptables.Table, chain string) error {
	return t.timed("single-rule tools", 0, func() error { return t.Interface.EnsureChain(ctx, table, chain) })
}

func (t *timedIPT) ChainExists(ctx context.Context, table kiptables.Table, chain string) (ok bool, err error) {
	err = t.timed("single-rule tools", 0, func() error {
		ok, err = t.Interface.ChainExists(ctx, table, chain)
		return err
	})
	return ok, err
}

func (t *timedIPT) EnsureRuleAtFront(ctx context.Context, table kiptables.Table, chain string, rule ...string) error {
	return t.timed("single-rule tools", 0, func() error { return t.Interface.EnsureRuleAtFront(ctx, table, chain, rule...) })
}

func (t *timedIPT) DeleteRule(ctx context.Context, table kiptables.Table, chain string, rule ...string) error {
	return t.timed("single-rule tools", 0, func() error { return t.Interface.DeleteRule(ctx, table, chain, rule...) })
}

// counters are the packet/byte counts iptables-save prints.
var counters = regexp.MustCompile(`\[[0-9]+:[0-9]+\]`)

// rulesDigest digests iptables-save output, line by line, without its
// comment lines and counters, and counts the rules: equal digests mean
// byte-identical rules (across restarts, and across flavours).
type rulesDigest struct {
	h     hash.Hash
	rules int
}

func newRulesDigest() *rulesDigest { return &rulesDigest{h: sha256.New()} }

func (d *rulesDigest) line(line []byte) {
	if len(line) == 0 || line[0] == '#' {
		return
	}
	if bytes.HasPrefix(line, []byte("-A ")) {
		d.rules++
	}
	d.h.Write(counters.ReplaceAll(line, []byte("[0:0]")))
	d.h.Write([]byte("\n"))
}

func (d *rulesDigest) sum() (digest string, rules int) {
	return hex.EncodeToString(d.h.Sum(nil))[:16], d.rules
}
