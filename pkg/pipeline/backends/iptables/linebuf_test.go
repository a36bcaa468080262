package iptables

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestLineBufferBlocks writes past several blocks and expects the text
// unchanged, the line count kept, and every block but the last ending at
// a line's end and near blockSize, and none after the first (which grew
// from nothing) grown by append.
func TestLineBufferBlocks(t *testing.T) {
	var l lineBuffer
	var want strings.Builder
	for i := 0; want.Len() < 3*blockSize+100; i++ {
		n := strconv.Itoa(i)
		l.rule("KUBE-SEP-"+n, w("-m", "comment", "--comment", quoted("ns/svc"+n)), w("-j", "DNAT"))
		l.chainLine("KUBE-SVC-" + n)
		want.WriteString("-A KUBE-SEP-" + n + ` -m comment --comment "ns/svc` + n + "\" -j DNAT\n:KUBE-SVC-" + n + " - [0:0]\n")
	}
	parts := l.bytes()
	if got := bytes.Join(parts, nil); string(got) != want.String() {
		t.Fatalf("text differs: %d bytes, want %d", len(got), want.Len())
	}
	if len(parts) != 4 {
		t.Errorf("%d blocks, want 4", len(parts))
	}
	for i, p := range parts[:len(parts)-1] {
		if p[len(p)-1] != '\n' || len(p) < blockSize || (i > 0 && cap(p) > blockSize+4<<10) {
			t.Errorf("block %d: len %d cap %d, ends %q", i, len(p), cap(p), p[len(p)-1])
		}
	}
	if wantLines := strings.Count(want.String(), "-A "); l.lines != wantLines {
		t.Errorf("lines = %d, want %d", l.lines, wantLines)
	}
}
