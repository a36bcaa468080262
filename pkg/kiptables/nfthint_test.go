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
	if got := withCacheHints([]byte(small)); string(got) != small {
		t.Errorf("small section changed:\n%s", got)
	}
	big := bigSection(5000) // 15k lines × 5k names
	got := string(withCacheHints([]byte(small + big)))
	if want := small + "*nat\n-L -n\n" + strings.TrimPrefix(big, "*nat\n"); got != want {
		t.Errorf("hinted input differs (len %d, want %d); head:\n%.200s", len(got), len(want), got[len(small):])
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
