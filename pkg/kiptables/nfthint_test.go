package kiptables

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// bigSection is a nat section naming n chains in about 3n lines.
func bigSection(n int) string {
	var b strings.Builder
	b.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, ":KUBE-SVC-%d - [0:0]\n", i)
	}
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "-A KUBE-SERVICES -d 10.0.0.1 -j KUBE-SVC-%d\n-A KUBE-SVC-%d -j DNAT --to-destination 10.1.0.1:80\n", i, i)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// hinted runs in through a cacheHinter, written in pieces of the given
// sizes (cycled; none: one write), and returns what it wrote and the most
// it held at once.
func hinted(t *testing.T, in []byte, pieces ...int) (out []byte, maxHeld int) {
	t.Helper()
	var b bytes.Buffer
	h := newCacheHinter(&b)
	for i := 0; len(in) > 0; i++ {
		n := len(in)
		if len(pieces) > 0 {
			n = min(n, pieces[i%len(pieces)])
		}
		if _, err := h.Write(in[:n]); err != nil {
			t.Fatal(err)
		}
		maxHeld = max(maxHeld, len(h.held))
		in = in[n:]
	}
	must(t, h.flush())
	return b.Bytes(), maxHeld
}

func TestCacheHintsOnlyForLongChainLists(t *testing.T) {
	small := "*filter\n:KUBE-FORWARD - [0:0]\n-A KUBE-FORWARD -j ACCEPT\nCOMMIT\n"
	for _, in := range []string{small, "*nat\n-A KUBE-X -j RETURN"} { // the last: no COMMIT, no newline
		if got, _ := hinted(t, []byte(in)); string(got) != in {
			t.Errorf("small section changed:\n%q\nwant\n%q", got, in)
		}
	}
	big := bigSection(5000) // 15k lines × 5k names
	got, _ := hinted(t, []byte(small+big+small))
	if want := small + "*nat\n-L -n\n" + strings.TrimPrefix(big, "*nat\n") + small; string(got) != want {
		t.Errorf("hinted input differs (len %d, want %d); head:\n%.200s", len(got), len(want), got[len(small):])
	}
}

// TestCacheHintsAcrossWrites writes the input in pieces of several sizes
// — lines straddle them, "*nat" and COMMIT are cut — and expects the hint
// in the same place as for one write, with the bytes around it unchanged.
func TestCacheHintsAcrossWrites(t *testing.T) {
	in := []byte("*filter\n:A - [0:0]\nCOMMIT\n" + bigSection(5000) + "*filter\n:B - [0:0]\nCOMMIT")
	want, _ := hinted(t, in)
	if !bytes.Contains(want, []byte("*nat\n-L -n\n:KUBE-SERVICES")) {
		t.Fatalf("no hint in the single-write case")
	}
	for _, pieces := range [][]int{{1}, {2, 3}, {7}, {26, 1, 4}, {4096}, {5, 30, 33, 34, 1000}} {
		if got, _ := hinted(t, in, pieces...); !bytes.Equal(got, want) {
			t.Errorf("pieces %v: hinted input differs (len %d, want %d); head:\n%.80s", pieces, len(got), len(want), got)
		}
	}
}

// TestCacheHintHoldsOnlyTheBeginning: a large section is held only until
// the decision, not whole — its writer may be rendering it as it goes.
func TestCacheHintHoldsOnlyTheBeginning(t *testing.T) {
	in := []byte(bigSection(20000)) // 60k lines, 1.4 MB
	got, held := hinted(t, in, 32<<10)
	if !bytes.HasPrefix(got, []byte("*nat\n-L -n\n")) {
		t.Fatalf("no hint:\n%.80s", got)
	}
	if held > len(in)/4 {
		t.Errorf("held up to %d of %d bytes", held, len(in))
	}
}

func TestRestoreHintsOnNFTOnly(t *testing.T) {
	big := []byte(bigSection(5000))
	for _, fl := range []Flavour{FlavourNFT, FlavourLegacy} {
		ex := &fakeExec{paths: tools(string(fl))}
		c, err := newClient(proxy.IPv4, fl, ex, false)
		must(t, err)
		must(t, c.Restore(ctx, big))
		if hinted := bytes.HasPrefix(ex.stdin[0], []byte("*nat\n-L -n\n")); hinted != (fl == FlavourNFT) {
			t.Errorf("%s: hinted = %t", fl, hinted)
		}
	}
}
