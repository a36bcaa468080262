package kiptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// fakeExec records calls and answers from a script.
type fakeExec struct {
	paths map[string]string // tool name -> path; missing means not installed
	calls []string
	stdin [][]byte
	// answer returns the output and error for one call.
	answer func(path string, args []string) ([]byte, error)
}

func (f *fakeExec) LookPath(file string) (string, error) {
	if p, ok := f.paths[file]; ok {
		return p, nil
	}
	return "", fmt.Errorf("%s: %w", file, exec.ErrNotFound)
}

func (f *fakeExec) Run(_ context.Context, path string, args []string, stdin func(io.Writer) error, stdout io.Writer) error {
	f.calls = append(f.calls, path+" "+strings.Join(args, " "))
	var in bytes.Buffer
	if stdin != nil {
		if err := stdin(&in); err != nil {
			return err
		}
	}
	f.stdin = append(f.stdin, in.Bytes())
	if f.answer == nil {
		return nil
	}
	out, err := f.answer(path, args)
	if stdout != nil {
		// In pieces, as a pipe delivers it: lines may straddle them.
		for len(out) > 0 {
			n := min(len(out), 7)
			_, _ = stdout.Write(out[:n])
			out = out[n:]
		}
	}
	return err
}

func tools(flavour string) map[string]string {
	m := map[string]string{}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			name := fam + "-" + flavour + suffix
			m[name] = "/usr/sbin/" + name
		}
	}
	return m
}

func TestRestoreAndSaveArgs(t *testing.T) {
	ex := &fakeExec{paths: tools("nft")}
	c, err := newClient(proxy.IPv6, FlavourNFT, ex, false)
	must(t, err)
	must(t, c.Restore(ctx, []byte("*nat\nCOMMIT\n")))
	_, err = c.Save(ctx, TableNAT)
	must(t, err)
	want := []string{
		"/usr/sbin/ip6tables-nft-restore -w 5 -W 100000 --noflush --counters",
		"/usr/sbin/ip6tables-nft-save -t nat",
	}
	if strings.Join(ex.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s", strings.Join(ex.calls, "\n"))
	}
	if string(ex.stdin[0]) != "*nat\nCOMMIT\n" {
		t.Errorf("restore stdin = %q", ex.stdin[0])
	}
}

func TestRestoreRetriesOnLockContention(t *testing.T) {
	fails := 2
	ex := &fakeExec{paths: tools("legacy"), answer: func(string, []string) ([]byte, error) {
		if fails > 0 {
			fails--
			return nil, errors.New("Another app is currently holding the xtables lock. Stopped waiting after 5s.")
		}
		return nil, nil
	}}
	c, err := newClient(proxy.IPv4, FlavourLegacy, ex, false)
	must(t, err)
	var pauses []time.Duration
	c.sleep = func(_ context.Context, d time.Duration) error { pauses = append(pauses, d); return nil }
	must(t, c.Restore(ctx, []byte("x")))
	if len(ex.calls) != 3 || len(pauses) != 2 || pauses[1] != 2*pauses[0] {
		t.Errorf("calls %d, pauses %v; want 3 calls and doubling pauses", len(ex.calls), pauses)
	}

	// Persistent contention gives up with ErrLocked; other errors are not retried.
	ex.answer = func(string, []string) ([]byte, error) { return nil, errors.New("xtables lock") }
	if err := c.Restore(ctx, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("persistent lock: err = %v", err)
	}
	ex.calls = nil
	ex.answer = func(string, []string) ([]byte, error) { return nil, errors.New("line 3 failed") }
	if err := c.Restore(ctx, nil); err == nil || len(ex.calls) != 1 {
		t.Errorf("plain failure: err = %v after %d calls", err, len(ex.calls))
	}
	// iptables-nft-restore exits with status 4 when the kernel refuses
	// the transaction: no lock is involved.
	status4 := exec.Command("sh", "-c", "exit 4").Run()
	ex.calls = nil
	ex.answer = func(string, []string) ([]byte, error) {
		return nil, fmt.Errorf("%w: line 3: RULE_APPEND failed (No such file or directory): rule in chain KUBE-X", status4)
	}
	if err := c.Restore(ctx, nil); err == nil || errors.Is(err, ErrLocked) || len(ex.calls) != 1 {
		t.Errorf("kernel refusal with status 4: err = %v after %d calls, want no retry", err, len(ex.calls))
	}
}

func TestNewNeedsTools(t *testing.T) {
	if _, err := newClient(proxy.IPv4, FlavourLegacy, &fakeExec{paths: tools("nft")}, false); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("missing legacy tools: err = %v", err)
	}
}

func TestDetectFlavour(t *testing.T) {
	both := tools("nft")
	for k, v := range tools("legacy") {
		both[k] = v
	}
	rules := func(n int) []byte { return []byte(strings.Repeat("-A INPUT -j ACCEPT\n", n)) }
	cases := []struct {
		name        string
		paths       map[string]string
		legacy, nft func(table string) []byte
		want        Flavour
	}{
		{"empty host defaults to nft", both, nil, nil, FlavourNFT},
		{"kubelet hint in legacy", both, func(t string) []byte {
			if t == "mangle" {
				return []byte(":KUBE-IPTABLES-HINT - [0:0]\n")
			}
			return nil
		}, func(string) []byte { return rules(50) }, FlavourLegacy},
		{"kubelet hint in nft beats legacy rules", both, func(string) []byte { return rules(5) }, func(t string) []byte {
			if t == "mangle" {
				return []byte(":KUBE-IPTABLES-HINT - [0:0]\n")
			}
			return nil
		}, FlavourNFT},
		{"ten legacy rules", both, func(string) []byte { return rules(10) }, func(string) []byte { return rules(40) }, FlavourLegacy},
		{"more nft rules", both, func(string) []byte { return rules(3) }, func(string) []byte { return rules(4) }, FlavourNFT},
		{"more legacy rules", both, func(string) []byte { return rules(3) }, func(string) []byte { return rules(1) }, FlavourLegacy},
		{"only legacy installed", tools("legacy"), nil, nil, FlavourLegacy},
	}
	for _, c := range cases {
		ex := &fakeExec{paths: c.paths, answer: func(path string, args []string) ([]byte, error) {
			table := ""
			if len(args) == 2 {
				table = args[1]
			}
			src := c.nft
			if strings.Contains(path, "legacy") {
				src = c.legacy
			}
			if src == nil || strings.Contains(path, "ip6tables") {
				src = func(string) []byte { return nil }
			}
			if !strings.HasSuffix(path, "-save") { // -t TABLE -L CHAIN -n
				if slices.Contains(SavedChainNames(src(args[1])), args[3]) {
					return nil, nil
				}
				return nil, errors.New("exit status 1: no such chain")
			}
			return src(table), nil
		}}
		if got, why := detectFlavour(ctx, ex); got != c.want {
			t.Errorf("%s: got %s (%s), want %s", c.name, got, why, c.want)
		}
	}
}

// TestDetectFlavourLeavesNFTRulesUnread: with no legacy rules, the rules
// iptables-nft holds (350k after a 10k-service sync, read at every start)
// are not saved, and its mangle chains are listed without iptables-nft-save
// (which fetches every table).
func TestDetectFlavourLeavesNFTRulesUnread(t *testing.T) {
	both := tools("nft")
	for k, v := range tools("legacy") {
		both[k] = v
	}
	ex := &fakeExec{paths: both, answer: func(path string, args []string) ([]byte, error) {
		switch {
		case !strings.HasSuffix(path, "-save"):
			return nil, errors.New("exit status 1: no such chain")
		case strings.Contains(path, "nft"):
			return []byte(strings.Repeat("-A KUBE-SEP-X -j DNAT --to-destination 10.0.0.1:80\n", 1000)), nil
		}
		return nil, nil
	}}
	if got, why := detectFlavour(ctx, ex); got != FlavourNFT {
		t.Errorf("got %s (%s), want nft", got, why)
	}
	listed := false
	for _, call := range ex.calls {
		if strings.Contains(call, "nft-save") {
			t.Errorf("ran %s", call)
		}
		listed = listed || strings.HasSuffix(call, "iptables-nft -t mangle -L KUBE-IPTABLES-HINT -n")
	}
	if !listed {
		t.Errorf("iptables-nft's hint chain was not looked for; calls:\n%s", strings.Join(ex.calls, "\n"))
	}
}

// onPath puts scripts (name → body) first on PATH.
func onPath(t *testing.T, scripts map[string]string) {
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// shortProgressTimes makes watchProgress's times short for one test.
func shortProgressTimes(t *testing.T, stall, limit time.Duration) {
	oldStall, oldLimit, oldPoll := stallTimeout, runLimit, progressPoll
	stallTimeout, runLimit, progressPoll = stall, limit, 20*time.Millisecond
	t.Cleanup(func() { stallTimeout, runLimit, progressPoll = oldStall, oldLimit, oldPoll })
}

// TestHungToolIsKilled: a hung iptables-restore (here a script on PATH
// that sleeps) must fail the restore, saying it made no progress, instead
// of blocking the sync for ever. The 30 s guard only catches a call that
// never returns; the stall timeout is 300 ms.
func TestHungToolIsKilled(t *testing.T) {
	onPath(t, map[string]string{"iptables-restore": "exec sleep 300\n", "iptables-save": "exec sleep 300\n"})
	shortProgressTimes(t, 300*time.Millisecond, time.Hour)
	c, err := newClient(proxy.IPv4, "", osExec{}, false)
	must(t, err)
	done := make(chan error, 2)
	go func() {
		// More input than a pipe holds: the writer blocks until the
		// killed tool's end of the pipe closes.
		done <- c.Restore(context.Background(), []byte("*nat\n"), bytes.Repeat([]byte("-A KUBE-X -j RETURN\n"), 1<<16), []byte("COMMIT\n"))
		_, err := c.Save(context.Background(), TableNAT)
		done <- err
	}()
	for _, what := range []string{"restore", "save"} {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "killed, it made no progress") {
				t.Errorf("%s: got %v, want a killed-without-progress error", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return: no stall detection on the process", what)
		}
	}
}

// busyFor is a shell loop that keeps the CPU busy for about the given
// centiseconds without starting a process, after reading all its input.
const busyFor = `cat >/dev/null
read up _ </proc/uptime; end=$(( ${up%%.*}${up#*.} + %d ))
while read up _ </proc/uptime; do [ $(( ${up%%.*}${up#*.} )) -ge $end ] && exit 0; done
`

// TestWorkingToolIsNotKilled: a restore that works longer than the stall
// timeout (a big table on a loaded node) is let finish; one that keeps
// working past the run limit is killed.
func TestWorkingToolIsNotKilled(t *testing.T) {
	onPath(t, map[string]string{"iptables-restore": fmt.Sprintf(busyFor, 300), "iptables-save": "exit 0\n"})
	c, err := newClient(proxy.IPv4, "", osExec{}, false)
	must(t, err)
	input := [][]byte{[]byte("*nat\n"), bytes.Repeat([]byte("-A KUBE-X -j RETURN\n"), 1<<16), []byte("COMMIT\n")}

	shortProgressTimes(t, time.Second, time.Hour)
	if err := c.Restore(context.Background(), input...); err != nil {
		t.Errorf("a tool busy for 3 s with a stall timeout of 1 s: %v, want it let finish", err)
	}
	shortProgressTimes(t, time.Second, 1500*time.Millisecond)
	if err := c.Restore(context.Background(), input...); err == nil || !strings.Contains(err.Error(), "killed, it ran too long") {
		t.Errorf("a tool busy for 3 s with a run limit of 1.5 s: %v, want it killed for its length", err)
	}
}

// TestChainNamesStreamed: ChainNames parses iptables-save as it arrives
// (fakeExec writes 7 bytes at a time, so lines straddle writes), last
// line without a newline included.
func TestChainNamesStreamed(t *testing.T) {
	save := "# Generated\n*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n:KUBE-SVC-ABCDEFGHIJKLMNOP - [0:0]\nCOMMIT\n:LAST - [0:0]"
	ex := &fakeExec{paths: tools("nft"), answer: func(string, []string) ([]byte, error) { return []byte(save), nil }}
	c, err := newClient(proxy.IPv4, FlavourNFT, ex, false)
	must(t, err)
	got, err := c.ChainNames(ctx, TableNAT)
	must(t, err)
	want := []string{"PREROUTING", "KUBE-SERVICES", "KUBE-SVC-ABCDEFGHIJKLMNOP", "LAST"}
	if !slices.Equal(got, want) {
		t.Errorf("ChainNames = %q, want %q", got, want)
	}
	if !slices.Equal(SavedChainNames([]byte(save)), want) {
		t.Errorf("SavedChainNames = %q, want %q", SavedChainNames([]byte(save)), want)
	}
}
