package kiptables

import (
	"fmt"
	"io"
	"os/exec"
	"testing"
)

// TestCommitWatch: the first COMMIT's line is found in input written in
// pieces that split lines, and a tool's error counts as nothing committed
// only when every line it names comes before it (or is it, for
// iptables-nft).
func TestCommitWatch(t *testing.T) {
	input := "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j RETURN\nCOMMIT\n*filter\n-A KUBE-B -j RETURN\nCOMMIT\n"
	exitErr := &exec.ExitError{}
	for _, tc := range []struct {
		stderr string
		nft    bool
		want   bool
	}{
		{"Error occurred at line: 3", false, true},
		{"iptables-nft-restore v1.8.9 (nf_tables): \nline 3: RULE_APPEND failed (No such file or directory): rule in chain KUBE-A", true, true},
		{"iptables-restore: line 4 failed", false, false},
		{"iptables-nft-restore: line 4 failed: No chain/target/match by that name.", true, true},
		{"iptables-nft-restore: line 6 failed: No chain/target/match by that name.", true, false},
		{"Error occurred at line: 6", false, false},
		{"killed", false, false},
	} {
		for _, piece := range []int{1, 5, len(input)} {
			c := &commitWatch{w: io.Discard, atomicCommit: tc.nft}
			for in := input; len(in) > 0; in = in[min(piece, len(in)):] {
				_, _ = c.Write([]byte(in[:min(piece, len(in))]))
			}
			if c.atLine != 4 {
				t.Fatalf("pieces of %d: first COMMIT at line %d, want 4", piece, c.atLine)
			}
			err := fmt.Errorf("iptables-restore: %w: %s", exitErr, tc.stderr)
			if got := c.nothingCommitted(err); got != tc.want {
				t.Errorf("nft %t, %q: nothing committed %t, want %t", tc.nft, tc.stderr, got, tc.want)
			}
		}
	}
	// A tool that failed before it was given a COMMIT committed nothing,
	// whatever it says; an error that is not the tool's exit is no proof.
	c := &commitWatch{w: io.Discard}
	_, _ = c.Write([]byte("*nat\n-A KUBE-A"))
	if !c.nothingCommitted(fmt.Errorf("x: %w", exitErr)) || c.nothingCommitted(fmt.Errorf("writing the input: broken pipe")) {
		t.Error("an input without COMMIT: want nothing committed only for the tool's exit")
	}
}
