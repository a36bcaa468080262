package kiptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	goiptables "github.com/coreos/go-iptables/iptables"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Lock handling. iptables-legacy serializes writers with the xtables lock
// (/run/xtables.lock, shared with kubelet and CNI plugins); "-w 5 -W 100000"
// waits up to 5 s, polling every 100 ms, as upstream does. A tool that
// still could not get the lock exits with status 4; we retry that a few
// times with a growing pause rather than fail the whole sync (told by the
// message: see isLockError).
// iptables-nft accepts and ignores the flags.
var lockArgs = []string{"-w", "5", "-W", "100000"}

// waitDelay bounds the wait for the output pipes after a tool is killed.
const waitDelay = 5 * time.Second

const (
	lockRetries = 3
	lockBackoff = 500 * time.Millisecond
)

// execer runs a program; it is the one OS seam, so tests can check argv
// and stdin without running anything.
type execer interface {
	LookPath(file string) (string, error)
	// Run runs path with args and the input stdin writes (nil for none),
	// writing its output to stdout (nil discards it); on failure the error
	// includes stderr and wraps *exec.ExitError when the program ran.
	Run(ctx context.Context, path string, args []string, stdin func(io.Writer) error, stdout io.Writer) error
}

type osExec struct{}

func (osExec) LookPath(file string) (string, error) { return exec.LookPath(file) }

// Run runs the tool until it ends, or until watchProgress kills it: a hung
// tool fails the sync instead of blocking the sync loop for ever (the
// runner then retries with backoff and /healthz reports the stall). A
// restore carries a whole table, which takes minutes at tens of thousands
// of services on a loaded node: only a run without progress is killed.
// The single-rule iptables calls through go-iptables (setup and the
// canary) take no context and are not covered.
func (osExec) Run(parent context.Context, path string, args []string, stdin func(io.Writer) error, stdout io.Writer) error {
	ctx, kill := context.WithCancelCause(parent)
	defer kill(nil)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = waitDelay
	var stderr bytes.Buffer
	// A nil Stdout is /dev/null, written by the child directly: a
	// restore's listing (see cacheHinter) is tens of MB at 10k services.
	cmd.Stdout = stdout
	cmd.Stderr = &stderr
	err := runWithInput(cmd, stdin, func(pid int, fed *atomic.Int64) { go watchProgress(ctx, pid, fed, kill) })
	if err != nil {
		if cause := context.Cause(ctx); parent.Err() == nil && (errors.Is(cause, errStalled) || errors.Is(cause, errRunLimit)) {
			err = fmt.Errorf("killed, it %v: %w", cause, err)
		}
		return fmt.Errorf("%s %s: %w: %s", path, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// runWithInput runs cmd, feeding it what stdin writes from this goroutine
// while it runs, and tells started the process and how much of the input
// it has read so far. When the program fails, its exit is the error (a
// write into its closed stdin only follows from that).
func runWithInput(cmd *exec.Cmd, stdin func(io.Writer) error, started func(pid int, fed *atomic.Int64)) error {
	var fed countingWriter
	var pipe io.WriteCloser
	if stdin != nil {
		var err error
		if pipe, err = cmd.StdinPipe(); err != nil {
			return err
		}
		fed.w = pipe
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	started(cmd.Process.Pid, &fed.n)
	var werr error
	if stdin != nil {
		werr = stdin(&fed)
		if cerr := pipe.Close(); werr == nil {
			werr = cerr
		}
	}
	if err := cmd.Wait(); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("writing the input: %w", werr)
	}
	return nil
}

// Client is the real Interface: it execs one flavour's tools for one family.
type Client struct {
	family        proxy.IPFamily
	flavour       Flavour
	restore, save string // absolute paths
	rules         *goiptables.IPTables
	exec          execer
	sleep         func(ctx context.Context, d time.Duration) error
}

var _ Interface = (*Client)(nil)

// New returns a client for family using flavour's binaries
// (iptables-nft-restore, ip6tables-legacy-save, ...).
func New(family proxy.IPFamily, flavour Flavour) (*Client, error) {
	return newClient(family, flavour, osExec{}, true)
}

func newClient(family proxy.IPFamily, flavour Flavour, ex execer, withRules bool) (*Client, error) {
	c := &Client{family: family, flavour: flavour, exec: ex, sleep: sleepCtx}
	base := toolName(family, flavour)
	var err error
	if c.restore, err = ex.LookPath(base + "-restore"); err != nil {
		return nil, fmt.Errorf("finding %s-restore: %w", base, err)
	}
	if c.save, err = ex.LookPath(base + "-save"); err != nil {
		return nil, fmt.Errorf("finding %s-save: %w", base, err)
	}
	if withRules {
		proto := goiptables.ProtocolIPv4
		if family == proxy.IPv6 {
			proto = goiptables.ProtocolIPv6
		}
		path, err := ex.LookPath(base)
		if err != nil {
			return nil, fmt.Errorf("finding %s: %w", base, err)
		}
		// Timeout makes go-iptables pass "--wait 5" like the restore path.
		if c.rules, err = goiptables.New(goiptables.IPFamily(proto), goiptables.Path(path), goiptables.Timeout(5)); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return c, nil
}

// toolName is "iptables-nft", "ip6tables-legacy" or, with no flavour,
// plain "iptables"/"ip6tables".
func toolName(family proxy.IPFamily, flavour Flavour) string {
	name := "iptables"
	if family == proxy.IPv6 {
		name = "ip6tables"
	}
	if flavour != "" {
		name += "-" + string(flavour)
	}
	return name
}

// Flavour is part of Interface.
func (c *Client) Flavour() Flavour { return c.flavour }

// Restore is part of Interface.
func (c *Client) Restore(ctx context.Context, data ...[]byte) error {
	return c.RestoreFrom(ctx, func(w io.Writer) error {
		for _, d := range data {
			if _, err := w.Write(d); err != nil {
				return err
			}
		}
		return nil
	})
}

// RestoreFrom is part of Interface. On iptables-nft, large sections get a
// read-only listing command first (see cacheHinter). A refusal before the
// first COMMIT wraps ErrNothingCommitted.
func (c *Client) RestoreFrom(ctx context.Context, write func(w io.Writer) error) error {
	var sent *commitWatch // what the last attempt gave the tool
	stdin := func(w io.Writer) error {
		sent = &commitWatch{w: w, atomicCommit: c.flavour == FlavourNFT}
		if c.flavour != FlavourNFT {
			return write(sent)
		}
		h := newCacheHinter(sent)
		if err := write(h); err != nil {
			return err
		}
		return h.flush()
	}
	args := append(append([]string{}, lockArgs...), "--noflush", "--counters")
	err := c.runRetrying(ctx, c.restore, args, stdin, nil)
	if err != nil && sent != nil && sent.nothingCommitted(err) {
		return fmt.Errorf("%w: %w", ErrNothingCommitted, err)
	}
	return err
}

// Save is part of Interface.
func (c *Client) Save(ctx context.Context, table Table) ([]byte, error) {
	var out bytes.Buffer
	err := c.saveTo(ctx, table, func() io.Writer {
		out.Reset()
		return &out
	})
	if err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// saveTo runs iptables-save for table, its output going to the writer
// stdout returns for each attempt.
func (c *Client) saveTo(ctx context.Context, table Table, stdout func() io.Writer) error {
	return c.runRetrying(ctx, c.save, []string{"-t", string(table)}, nil, stdout)
}

// runRetrying runs a tool, retrying with backoff while the xtables lock is
// contended. Each attempt's output goes to the writer stdout returns (nil
// stdout: discarded).
func (c *Client) runRetrying(ctx context.Context, path string, args []string, stdin func(io.Writer) error, stdout func() io.Writer) error {
	return c.retryLocked(ctx, path, func() error {
		var w io.Writer
		if stdout != nil {
			w = stdout()
		}
		return c.exec.Run(ctx, path, args, stdin, w)
	})
}

// retryLocked runs op, retrying with a doubling pause while it fails on
// the xtables lock (held by kubelet, a CNI plugin or another family's
// restore), and wraps ErrLocked when it never gets it.
func (c *Client) retryLocked(ctx context.Context, what string, op func() error) error {
	pause := lockBackoff
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil || !isLockError(err) {
			return err
		}
		if attempt == lockRetries {
			return fmt.Errorf("%w: %w", ErrLocked, err)
		}
		klog.V(2).InfoS("xtables lock busy, retrying", "tool", what, "pause", pause)
		if err := c.sleep(ctx, pause); err != nil {
			return err
		}
		pause *= 2
	}
}

// isLockError tells contention for the xtables lock by the tools' message
// (both errors carry the tool's stderr). The exit status alone is no
// proof: 4 is any "resource problem", and iptables-nft-restore exits with
// it when the kernel refuses a transaction, which no retry changes.
func isLockError(err error) bool {
	return strings.Contains(err.Error(), "xtables lock")
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
