package benchkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// The nftables and iptables benchmarks measure each scale in a child
// process of their own binary (a fresh namespace, an RSS figure of its
// own): the parent runs a Child and reads the JSON that ChildMain prints.

// Child is one run of a benchmark's measuring child: this binary again,
// with Args.
type Child struct {
	Args []string
	// OwnGroup runs the child in a process group of its own, killed whole
	// (the tools it started included) when the context ends; otherwise
	// only the child is killed.
	OwnGroup bool
}

// Run runs the child until it exits or ctx ends, and decodes the JSON it
// printed into result; a failure carries the last lines of its stderr.
func (c Child) Run(ctx context.Context, result any) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, c.Args...)
	if c.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	}
	return runChild(cmd, result)
}

// ChildMain is the body of a measuring child: it runs measure and prints
// its result as JSON on stdout (errors go to stderr). It returns the
// process's exit code.
func ChildMain(measure func() (any, error)) int {
	res, err := measure()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runChild runs cmd (a benchmark's measuring child) and decodes the JSON
// it prints into result; a failure carries the last lines of its stderr.
func runChild(cmd *exec.Cmd, result any) error {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, lastLines(stderr.String(), 5))
	}
	if err := json.Unmarshal(stdout.Bytes(), result); err != nil {
		return fmt.Errorf("child output: %w", err)
	}
	return nil
}

// lastLines joins the last n lines of s with " | " (a child's stderr in
// one error line).
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
