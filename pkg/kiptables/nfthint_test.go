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

func TestCacheHintsOnlyForLongChainLists(t *testing.T) {
	small := "*filter\n:KUBE-FORWARD - [0:0]\n-A KUBE-FORWARD -j ACCEPT\nCOMMIT\n"
	if got := bytes.Join(withCacheHints([][]byte{[]byte(small)}), nil); string(got) != small {
		t.Errorf("small section changed:\n%s", got)
	}
	big := bigSection(5000) // 15k lines × 5k names
	got := string(bytes.Join(withCacheHints([][]byte{[]byte(small + big)}), nil))
	if want := small + "*nat\n-L -n\n" + strings.TrimPrefix(big, "*nat\n"); got != want {
		t.Errorf("hinted input differs (len %d, want %d); head:\n%.200s", len(got), len(want), got[len(small):])
	}
}

// TestCacheHintsAcrossChunks cuts the input into chunks at every few
// offsets — mid-line, at "*nat", at the end — and expects the hint in the
// same place as for one buffer, with the chunks' bytes unchanged around it.
func TestCacheHintsAcrossChunks(t *testing.T) {
	in := []byte("*filter\n:A - [0:0]\nCOMMIT\n" + bigSection(5000))
	want := bytes.Join(withCacheHints([][]byte{in}), nil)
	if !bytes.Contains(want, []byte("*nat\n-L -n\n")) {
		t.Fatalf("no hint in the single-buffer case")
	}
	for _, cuts := range [][]int{{1}, {26}, {27}, {31}, {32}, {33}, {len(in) - 1}, {len(in)}, {5, 30, 33, 34, 1000, len(in)}} {
		var chunks [][]byte
		prev := 0
		for _, c := range cuts {
			chunks = append(chunks, in[prev:c])
			prev = c
		}
		chunks = append(chunks, in[prev:])
		if got := bytes.Join(withCacheHints(chunks), nil); !bytes.Equal(got, want) {
			t.Errorf("cut at %v: hinted input differs (len %d, want %d); head:\n%.80s", cuts, len(got), len(want), got)
		}
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
