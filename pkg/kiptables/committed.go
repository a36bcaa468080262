package kiptables

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"strconv"
)

// ErrNothingCommitted is wrapped by the error of a restore that the tool
// refused on a line before the input's first COMMIT: no table was
// committed, so the kernel holds what it held before the restore.
//
// Both flavours commit one table at its COMMIT line and stop at the first
// failure, so a later table's refusal follows the earlier tables' commits;
// only a refusal before the first COMMIT is known to have changed nothing,
// and on iptables-nft one of the first COMMIT itself, whose table is one
// netlink transaction. On iptables-legacy a refused first COMMIT does not
// count: it replaces the table and then restores its counters in a second
// call, which may fail after the replacement took effect.
var ErrNothingCommitted = errors.New("iptables-restore refused its input before any table was committed")

// failedLine finds the input line a tool's error names: "Error occurred
// at line: N" (a parse error), "line N failed" (a command or a COMMIT the
// kernel refused), iptables-nft's "line N: RULE_APPEND failed" (the rule
// of a refused transaction).
var failedLine = regexp.MustCompile(`(?m)\bline:? (\d+)(?::| failed|$)`)

// commitWatch passes restore input through and counts its lines up to the
// first COMMIT, the line numbers the tool reports being those of its
// stdin.
type commitWatch struct {
	w io.Writer
	// atomicCommit: a refused COMMIT changed nothing (iptables-nft).
	atomicCommit bool
	lines        int    // complete lines passed so far, until the first COMMIT
	line         []byte // the start of the current line (enough to tell COMMIT)
	atLine       int    // the first COMMIT's line number; 0 while none was passed
}

func (c *commitWatch) Write(p []byte) (int, error) {
	if c.atLine == 0 {
		c.scan(p)
	}
	return c.w.Write(p)
}

func (c *commitWatch) scan(p []byte) {
	for len(p) > 0 && c.atLine == 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if room := len(commitLine) + 1 - len(c.line); room > 0 {
			c.line = append(c.line, part[:min(room, len(part))]...)
		}
		if i < 0 {
			return
		}
		c.lines++
		if bytes.Equal(c.line, commitLine) {
			c.atLine = c.lines
		}
		c.line = c.line[:0]
		p = p[i+1:]
	}
}

// nothingCommitted reports whether err, the tool's failure on the input c
// passed, names only lines before the input's first COMMIT, or the tool
// failed before it was given a COMMIT at all.
func (c *commitWatch) nothingCommitted(err error) bool {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return false
	}
	if c.atLine == 0 {
		return true
	}
	ms := failedLine.FindAllStringSubmatch(err.Error(), -1)
	if len(ms) == 0 {
		return false
	}
	for _, m := range ms {
		n, perr := strconv.Atoi(m[1])
		if perr != nil || n > c.atLine || (n == c.atLine && !c.atomicCommit) {
			return false
		}
	}
	return true
}
