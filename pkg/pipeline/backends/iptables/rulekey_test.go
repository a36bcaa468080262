package iptables

import "testing"

// TestRuleKeyMatchesSavedRules: a rule as render writes it and as
// iptables-save (1.8.9, nft and legacy alike) prints it back have one key;
// rules that differ do not. The saved spellings are the tool's own output
// for the goldens of the shared cases; the kernel tests check every shared
// case against the real tools (TestKernelHeldPorts).
func TestRuleKeyMatchesSavedRules(t *testing.T) {
	same := []struct {
		v6            bool
		written, save string
	}{
		{false, `-A KUBE-SERVICES -m comment --comment "ns1/fw:http cluster IP" -m tcp -p tcp -d 172.30.0.22 --dport 80 -j KUBE-SVC-CFZXWPQEOLWT7XIV`,
			`-A KUBE-SERVICES -d 172.30.0.22/32 -p tcp -m comment --comment "ns1/fw:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-CFZXWPQEOLWT7XIV`},
		{false, `-A KUBE-NODEPORTS -m comment --comment ns1/fw:http -m tcp -p tcp --dport 30080 -j KUBE-EXT-CFZXWPQEOLWT7XIV`,
			`-A KUBE-NODEPORTS -p tcp -m comment --comment "ns1/fw:http" -m tcp --dport 30080 -j KUBE-EXT-CFZXWPQEOLWT7XIV`},
		{false, `-A KUBE-SVC-CFZXWPQEOLWT7XIV -m comment --comment "ns1/fw:http cluster IP" -m tcp -p tcp -d 172.30.0.22 --dport 80 ! -s 10.0.0.0/16 -j KUBE-MARK-MASQ`,
			`-A KUBE-SVC-CFZXWPQEOLWT7XIV ! -s 10.0.0.0/16 -d 172.30.0.22/32 -p tcp -m comment --comment "ns1/fw:http cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ`},
		{false, `-A KUBE-SVC-CFZXWPQEOLWT7XIV -m comment --comment "ns1/fw:http -> 10.0.1.1:8080" -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-AANMIBQRBKX3ZTSN`,
			`-A KUBE-SVC-CFZXWPQEOLWT7XIV -m comment --comment "ns1/fw:http -> 10.0.1.1:8080" -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-AANMIBQRBKX3ZTSN`},
		{false, `-A KUBE-FW-CFZXWPQEOLWT7XIV -m comment --comment "ns1/fw:http loadbalancer IP" -s 203.0.113.0/24 -j KUBE-EXT-CFZXWPQEOLWT7XIV`,
			`-A KUBE-FW-CFZXWPQEOLWT7XIV -s 203.0.113.0/24 -m comment --comment "ns1/fw:http loadbalancer IP" -j KUBE-EXT-CFZXWPQEOLWT7XIV`},
		{false, `-A KUBE-SEP-OC4ZMRXLHHVQ3VIG -m comment --comment ns1/sticky:http -m recent --name KUBE-SEP-OC4ZMRXLHHVQ3VIG --set -m tcp -p tcp -j DNAT --to-destination 10.0.1.1:8080`,
			`-A KUBE-SEP-OC4ZMRXLHHVQ3VIG -p tcp -m comment --comment "ns1/sticky:http" -m recent --set --name KUBE-SEP-OC4ZMRXLHHVQ3VIG --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 10.0.1.1:8080`},
		{true, `-A KUBE-SEP-CUOD7OGKZK4XNMCD -m comment --comment ns1/sticky:http -s fd00:10::2:1 -j KUBE-MARK-MASQ`,
			`-A KUBE-SEP-CUOD7OGKZK4XNMCD -s fd00:10::2:1/128 -m comment --comment "ns1/sticky:http" -j KUBE-MARK-MASQ`},
		{true, `-A KUBE-SEP-CUOD7OGKZK4XNMCD -m comment --comment ns1/sticky:http -m recent --name KUBE-SEP-CUOD7OGKZK4XNMCD --set -m tcp -p tcp -j DNAT --to-destination [fd00:10::2:1]:8080`,
			`-A KUBE-SEP-CUOD7OGKZK4XNMCD -p tcp -m comment --comment "ns1/sticky:http" -m recent --set --name KUBE-SEP-CUOD7OGKZK4XNMCD --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -m tcp -j DNAT --to-destination [fd00:10::2:1]:8080`},
		{true, `-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns1/empty:http has no endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j REJECT`,
			`-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment "ns1/empty:http has no endpoints" -m addrtype --dst-type LOCAL -m tcp --dport 30080 -j REJECT --reject-with icmp6-port-unreachable`},
		{false, `-A KUBE-FW-CFZXWPQEOLWT7XIV -m comment --comment "other traffic to ns1/fw:http will be dropped by KUBE-PROXY-FIREWALL"`,
			`-A KUBE-FW-CFZXWPQEOLWT7XIV -m comment --comment "other traffic to ns1/fw:http will be dropped by KUBE-PROXY-FIREWALL"`},
	}
	for _, c := range same {
		if w, s := ruleKey(c.written, c.v6), ruleKey(c.save, c.v6); w != s {
			t.Errorf("one rule, two keys:\n written %s\n saved   %s", w, s)
		}
	}
	differ := [][2]string{
		{`-A KUBE-SEP-X -m tcp -p tcp -j DNAT --to-destination 10.0.1.1:8080`, `-A KUBE-SEP-X -p tcp -m tcp -j DNAT --to-destination 10.0.1.2:8080`},
		{`-A KUBE-SVC-X -s 10.0.0.0/16 -j KUBE-MARK-MASQ`, `-A KUBE-SVC-X ! -s 10.0.0.0/16 -j KUBE-MARK-MASQ`},
		{`-A KUBE-SVC-X -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-A`, `-A KUBE-SVC-X -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-A`},
		{`-A KUBE-SEP-X -m recent --name KUBE-SEP-X --set -j DNAT --to-destination 10.0.1.1:80`, `-A KUBE-SEP-X -m recent --name KUBE-SEP-X --set --mask 255.255.0.0 -j DNAT --to-destination 10.0.1.1:80`},
		{`-A KUBE-SERVICES -m comment --comment c -m tcp -p tcp -d 10.0.0.1 --dport 80 -j REJECT`, `-A KUBE-SERVICES -m comment --comment c -m tcp -p tcp -d 10.0.0.1 --dport 80 -j DROP`},
		{`-A KUBE-EXT-X -m comment --comment c -j KUBE-MARK-MASQ -m addrtype --src-type LOCAL`, `-A KUBE-EXT-X -m addrtype --src-type LOCAL -m comment --comment c -j KUBE-MARK-MASQ`},
	}
	for _, d := range differ {
		if ruleKey(d[0], false) == ruleKey(d[1], false) {
			t.Errorf("two rules, one key %q:\n %s\n %s", ruleKey(d[0], false), d[0], d[1])
		}
	}
}
