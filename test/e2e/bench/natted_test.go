//go:build benche2e

package bench

import "testing"

func TestNatted(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"tcp      6 119 TIME_WAIT src=10.244.1.2 dst=10.96.0.5 sport=40000 dport=80 src=10.244.1.10 dst=10.244.1.2 sport=8080 dport=40000 [ASSURED] mark=0 use=1", true},
		{"tcp      6 119 TIME_WAIT src=10.244.1.2 dst=10.244.1.10 sport=40000 dport=8080 src=10.244.1.10 dst=10.244.1.2 sport=8080 dport=40000 [ASSURED] mark=0 use=1", false},
		{"tcp      6 119 TIME_WAIT src=10.244.1.2 dst=10.244.1.10 sport=40000 dport=8080 src=10.244.1.10 dst=198.18.0.11 sport=8080 dport=40000 [ASSURED] use=1", true},
		{"conntrack v1.4.7 (conntrack-tools): 0 flow entries have been shown.", false},
	} {
		if got := natted(tc.line); got != tc.want {
			t.Errorf("natted(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

func TestAddWindows(t *testing.T) {
	a := datapathResult{Rate: 100, OK: 100, Seconds: 1, P50MS: 1, P99MS: 2, KernelSeconds: 0.5, NATEntries: 100}
	b := datapathResult{Rate: 300, OK: 300, Seconds: 1, P50MS: 3, P99MS: 4, KernelSeconds: 0.5, NATEntries: 0}
	got := addWindows(addWindows(datapathResult{}, a), b)
	want := datapathResult{Rate: 200, OK: 400, Seconds: 2, P50MS: 2.5, P99MS: 3.5, KernelSeconds: 1, NATEntries: 100}
	if got != want {
		t.Errorf("addWindows = %+v, want %+v", got, want)
	}
	if got := addWindows(a, datapathResult{OK: 1, Seconds: 1, NATEntries: -1}); got.NATEntries != -1 {
		t.Errorf("a window without a count left %d NAT entries, want -1 (unknown)", got.NATEntries)
	}
}
