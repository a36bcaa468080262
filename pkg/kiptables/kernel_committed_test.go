package kiptables

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestKernelNothingCommitted: the real tools of both flavours, in a
// throwaway namespace. A refusal before the first COMMIT — a line the
// parser refuses, or (iptables-nft) a transaction the kernel refuses —
// wraps ErrNothingCommitted and the kernel is unchanged; a refusal in the
// second table does not, and the first table was committed.
func TestKernelNothingCommitted(t *testing.T) {
	netnstest.RequireKernel(t, "iptables-nft-restore", "iptables-legacy-restore")
	const good = "*nat\n:KUBE-GOOD - [0:0]\n-A KUBE-GOOD -j RETURN\nCOMMIT\n"
	cases := []struct {
		name, input string
		nothing     bool
		flavours    []Flavour
	}{
		{"parse error in the first table", "*nat\n:KUBE-BAD - [0:0]\n-A KUBE-BAD -s invalid/Prefix -j RETURN\nCOMMIT\n", true, nil},
		{"jump to a missing chain", "*nat\n:KUBE-BAD - [0:0]\n-A KUBE-BAD -j KUBE-NONE\nCOMMIT\n", true, nil},
		// iptables-nft finds out when the kernel refuses the transaction
		// (exit status 4, naming the rule's line); iptables-legacy when
		// it replaces the table, on the COMMIT line, which may count.
		{"kernel refuses the first table", "*nat\n:KUBE-BAD - [0:0]\n-A KUBE-BAD -m nfacct --nfacct-name svcproxy-none -j RETURN\nCOMMIT\n", true, []Flavour{FlavourNFT}},
		{"second table refused", good + "*filter\n-A KUBE-NONE -j RETURN\nCOMMIT\n", false, nil},
	}
	for _, fl := range []Flavour{FlavourNFT, FlavourLegacy} {
		for _, tc := range cases {
			if tc.flavours != nil && !slices.Contains(tc.flavours, fl) {
				continue
			}
			t.Run(string(fl)+"/"+tc.name, func(t *testing.T) {
				ns, err := netnstest.New(t).NewNS("ipt")
				if err != nil {
					t.Fatal(err)
				}
				var before, after []byte
				err = ns.Do(func() error {
					c, err := New(proxy.IPv4, fl)
					if err != nil {
						return err
					}
					ctx := context.Background()
					before, _ = c.Save(ctx, TableNAT)
					rerr := c.Restore(ctx, []byte(tc.input))
					if rerr == nil {
						t.Fatalf("the input was accepted:\n%s", tc.input)
					}
					if got := errors.Is(rerr, ErrNothingCommitted); got != tc.nothing {
						t.Errorf("ErrNothingCommitted: %t, want %t (%v)", got, tc.nothing, rerr)
					}
					after, err = c.Save(ctx, TableNAT)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				committed := strings.Contains(string(after), "KUBE-GOOD")
				if changed := rules(before) != rules(after); changed == tc.nothing || committed == tc.nothing {
					t.Errorf("nat before:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	}
}

// rules is iptables-save output without its comments (which hold times).
func rules(save []byte) string {
	var out []string
	for _, l := range strings.Split(string(save), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
