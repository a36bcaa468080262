package kiptables

import "testing"

// TestSplitListing: each rule goes to the table of the chain whose
// header line came last, and output that does not list exactly the
// chains asked for, in order, is refused.
func TestSplitListing(t *testing.T) {
	req := []ListRequest{
		{Table: TableMangle, Empty: []string{"KUBE-CANARY"}},
		{Table: TableNAT, List: []string{ChainOutput}},
		{Table: TableFilter, List: []string{ChainInput, ChainOutput}},
	}
	out := "-P OUTPUT ACCEPT\n-A OUTPUT -j KUBE-NAT\n-P INPUT ACCEPT\n-P OUTPUT DROP\n-A OUTPUT -j KUBE-A\n-A OUTPUT -j KUBE-B\n"
	got, err := splitListing([]byte(out), req)
	if err != nil {
		t.Fatal(err)
	}
	if nat, filter := string(got[TableNAT]), string(got[TableFilter]); nat != "-A OUTPUT -j KUBE-NAT\n" || filter != "-A OUTPUT -j KUBE-A\n-A OUTPUT -j KUBE-B\n" || len(got) != 2 {
		t.Errorf("nat %q, filter %q, %d tables", nat, filter, len(got))
	}
	for _, bad := range []string{
		"-P OUTPUT ACCEPT\n-P INPUT ACCEPT\n",                                   // a chain short
		"-A OUTPUT -j X\n-P OUTPUT ACCEPT\n-P INPUT ACCEPT\n-P OUTPUT ACCEPT\n", // a rule before any chain
		"-P INPUT ACCEPT\n-P OUTPUT ACCEPT\n-P OUTPUT ACCEPT\n",                 // out of order
		out + "-P FORWARD ACCEPT\n",                                             // a chain too many
	} {
		if _, err := splitListing([]byte(bad), req); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
