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

// TestStoppedAt: a run that failed right after a table's OUTPUT lacks the
// chain there; one that failed before any table, or printed other than
// OUTPUT and the chain by turns, is an error.
func TestStoppedAt(t *testing.T) {
	tables := []Table{TableMangle, TableNAT, TableFilter}
	both := "-P OUTPUT ACCEPT\n-N KUBE-C\n"
	for _, tc := range []struct {
		out     string
		failed  bool
		missing Table
		err     bool
	}{
		{out: both + "-P OUTPUT ACCEPT\n-A OUTPUT -j KUBE-X\n-N KUBE-C\n" + both},
		{out: "-P OUTPUT ACCEPT\n", failed: true, missing: TableMangle},
		{out: both + "-P OUTPUT ACCEPT\n-A OUTPUT -j KUBE-X\n", failed: true, missing: TableNAT},
		{out: both + both + "-P OUTPUT ACCEPT\n", failed: true, missing: TableFilter},
		{out: "", failed: true, err: true},   // the lock, the tool, a table
		{out: both, failed: true, err: true}, // failed between tables
		{out: both + both, err: true},        // a table short
		{out: "-N KUBE-C\n-P OUTPUT ACCEPT\n", failed: true, err: true},
		{out: both + both + both + "-P OUTPUT ACCEPT\n", failed: true, err: true},
	} {
		missing, err := stoppedAt([]byte(tc.out), "KUBE-C", tables, tc.failed)
		if missing != tc.missing || (err != nil) != tc.err {
			t.Errorf("%q, failed %t: %q, %v; want %q, error %t", tc.out, tc.failed, missing, err, tc.missing, tc.err)
		}
	}
}
