package knft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"sigs.k8s.io/knftables"
)

// execTimeout bounds one run of the nft binary, so that a hung nft (a
// stuck netlink socket, a kernel bug, a wedged lock) fails the sync
// instead of blocking the sync loop for ever; the runner then retries with
// backoff and /healthz reports the stall. One run carries a transaction of
// at most defaultMaxOps operations or one listing; the largest measured
// take about a second (a 10k×10 cold sync is a few dozen transactions in
// about that time), so two minutes never cuts a working nft short,
// even on a loaded node. Tests shorten it.
var execTimeout = 2 * time.Minute

// waitDelay bounds the wait for the output pipes after nft is killed (a
// child of it could hold them open).
const waitDelay = 5 * time.Second

// withTimeout returns ctx bounded by execTimeout and a function that turns
// an error of the call made with it into one that says it timed out.
func withTimeout(ctx context.Context) (context.Context, func(error) error, context.CancelFunc) {
	d := execTimeout
	tctx, cancel := context.WithTimeout(ctx, d)
	explain := func(err error) error {
		if err != nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("nft timed out after %v (killed): %w", d, err)
		}
		return err
	}
	return tctx, explain, cancel
}

// timeoutNFT bounds each knftables call that runs nft (Run, Check and the
// listings the read-back and the canary use) by execTimeout.
type timeoutNFT struct {
	knftables.Interface
}

func (t timeoutNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	ctx, explain, cancel := withTimeout(ctx)
	defer cancel()
	return explain(t.Interface.Run(ctx, tx))
}

func (t timeoutNFT) Check(ctx context.Context, tx *knftables.Transaction) error {
	ctx, explain, cancel := withTimeout(ctx)
	defer cancel()
	return explain(t.Interface.Check(ctx, tx))
}

func (t timeoutNFT) List(ctx context.Context, objectType string) ([]string, error) {
	ctx, explain, cancel := withTimeout(ctx)
	defer cancel()
	out, err := t.Interface.List(ctx, objectType)
	return out, explain(err)
}

func (t timeoutNFT) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	ctx, explain, cancel := withTimeout(ctx)
	defer cancel()
	out, err := t.Interface.ListRules(ctx, chain)
	return out, explain(err)
}

func (t timeoutNFT) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	ctx, explain, cancel := withTimeout(ctx)
	defer cancel()
	out, err := t.Interface.ListElements(ctx, objectType, name)
	return out, explain(err)
}

// txRunner commits one transaction.
type txRunner func(ctx context.Context, tx *knftables.Transaction) error

// maxElemsPerCommand bounds one coalesced element command, so that nft's
// parse tree for a single command stays small.
const maxElemsPerCommand = 4096

// nftRunner returns a txRunner that pipes the transaction into "nft -f -"
// like knftables does, but with runs of element operations on the same set
// coalesced into one command ("add element ip t s { a, b, … }").
// knftables writes one command per element, and nft's per-command cost
// (parsing, cache lookups, one netlink message per element) was most of a
// cold sync: coalescing the elements of a set into one command cut nft's
// CPU for the same transactions and kernel state by about 40 %.
func nftRunner(path string) txRunner {
	return func(ctx context.Context, tx *knftables.Transaction) error {
		text := tx.String()
		if i := strings.LastIndex(text, "# ERROR: "); i >= 0 {
			return fmt.Errorf("invalid transaction: %s", strings.TrimSpace(text[i+len("# ERROR: "):]))
		}
		ctx, explain, cancel := withTimeout(ctx)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, "-f", "-")
		cmd.WaitDelay = waitDelay
		cmd.Stdin = strings.NewReader(coalesceElements(text, maxElemsPerCommand))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) && stderr.Len() > 0 {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
			}
			return fmt.Errorf("nft: %w", explain(err))
		}
		return nil
	}
}

// coalesceElements merges consecutive lines "VERB element FAMILY TABLE SET
// { ITEM }" with the same verb and set into one command of at most max
// items. Order is kept, so a delete and an add of the same key stay apart
// and in sequence; any other line ends a run.
func coalesceElements(text string, max int) string {
	var out strings.Builder
	out.Grow(len(text))
	var head string // "add element ip kube-proxy set {" of the open run
	n := 0
	closeRun := func() {
		if n > 0 {
			out.WriteString(" }\n")
		}
		head, n = "", 0
	}
	for len(text) > 0 {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		h, item, ok := splitElementLine(line)
		if !ok {
			closeRun()
			if line != "" {
				out.WriteString(line)
				out.WriteByte('\n')
			}
			continue
		}
		if n > 0 && h == head && n < max {
			out.WriteString(", ")
		} else {
			closeRun()
			head = h
			out.WriteString(h)
			out.WriteByte(' ')
		}
		out.WriteString(item)
		n++
	}
	closeRun()
	return out.String()
}

// splitElementLine splits "add element ip t s { ITEM }" into "add element
// ip t s {" and ITEM, for add and delete lines holding one item.
func splitElementLine(line string) (head, item string, ok bool) {
	if !strings.HasPrefix(line, "add element ") && !strings.HasPrefix(line, "delete element ") {
		return "", "", false
	}
	open := strings.Index(line, " { ")
	if open < 0 || !strings.HasSuffix(line, " }") {
		return "", "", false
	}
	item = line[open+3 : len(line)-2]
	if strings.ContainsAny(item, "{}\"") { // a set expression or a comment: leave it alone
		return "", "", false
	}
	return line[:open+2], item, true
}
