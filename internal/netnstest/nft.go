package netnstest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Monitor records the ruleset changes the kernel announces in one namespace
// (`nft monitor`), to check that an operation changed nothing, or to count
// what it changed.
type Monitor struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex
	events []string
}

// StartNftMonitor starts `nft monitor` inside the namespace the calling code
// is about to program. It returns once nft is listening (it prints nothing
// until an event, so readiness is confirmed with a probe event).
func (ns *NS) StartNftMonitor() (*Monitor, error) {
	m := &Monitor{done: make(chan struct{})}
	var stdout *bufio.Scanner
	err := ns.Do(func() error {
		m.cmd = exec.Command("nft", "monitor")
		out, err := m.cmd.StdoutPipe()
		if err != nil {
			return err
		}
		stdout = bufio.NewScanner(out)
		stdout.Buffer(make([]byte, 0, 64<<10), 16<<20)
		return m.cmd.Start()
	})
	if err != nil {
		return nil, fmt.Errorf("nft monitor in %s: %w", ns.Role, err)
	}
	ready := make(chan struct{})
	var readyOnce sync.Once
	go func() {
		defer close(m.done)
		for stdout.Scan() {
			line := stdout.Text()
			if strings.Contains(line, monitorProbe) {
				readyOnce.Do(func() { close(ready) })
				continue
			}
			m.mu.Lock()
			m.events = append(m.events, line)
			m.mu.Unlock()
		}
	}()
	if err := ns.probeMonitor(ready); err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}

const monitorProbe = "svcp_monitor_probe"

// probeMonitor creates and deletes a scratch table until the monitor reports
// it, proving that the monitor's netlink subscription is in place.
func (ns *NS) probeMonitor(ready <-chan struct{}) error {
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if _, err := ns.Run(ctx, "nft", "add table ip "+monitorProbe+"; delete table ip "+monitorProbe); err != nil {
			return err
		}
		select {
		case <-ready:
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("nft monitor in %s did not start", ns.Role)
}

// Stop ends the monitor and returns every event line it saw, except its own
// probes and the "# new generation" markers.
func (m *Monitor) Stop() []string {
	// Let nft print what the kernel already sent before we kill it.
	time.Sleep(200 * time.Millisecond)
	_ = m.cmd.Process.Kill()
	<-m.done
	_ = m.cmd.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, e := range m.events {
		if strings.HasPrefix(e, "# new generation") || strings.TrimSpace(e) == "" {
			continue
		}
		out = append(out, e)
	}
	return out
}

// ListRuleset returns `nft -a list ruleset` in the namespace: with handles,
// so a chain or rule that was deleted and re-added shows up as a difference.
func (ns *NS) ListRuleset(ctx context.Context) (string, error) {
	out, err := ns.Run(ctx, "nft", "-a", "list", "ruleset")
	return string(out), err
}

// ListTables returns the lines of `nft list tables` in the namespace.
func (ns *NS) ListTables(ctx context.Context) ([]string, error) {
	out, err := ns.Run(ctx, "nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, l := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		if l != "" {
			tables = append(tables, l)
		}
	}
	return tables, nil
}
