package dataplane

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// explainReport is the part of `svcproxy explain --json` (internal/explain
// Report) the scenario compares with traffic.
type explainReport struct {
	Packet struct {
		Source string `json:"source"`
	} `json:"packet"`
	Verdict    string   `json:"verdict"`
	Service    string   `json:"service"`
	Source     string   `json:"source"`
	Policy     string   `json:"policy"`
	Endpoints  []string `json:"endpoints"`
	Masquerade bool     `json:"masquerade"`
	Balancing  string   `json:"balancing"`
	Reasons    []string `json:"reasons"`
	Quarantine *struct {
		ServicePort string `json:"servicePort"`
	} `json:"quarantine"`
}

func (r explainReport) String() string {
	return fmt.Sprintf("%s %s (%s source, %s) endpoints %v masquerade %t; why: %s",
		r.Verdict, r.Service, r.Source, r.Policy, r.Endpoints, r.Masquerade, strings.Join(r.Reasons, "; "))
}

// explainOn runs `svcproxy explain --json` inside node n's namespace
// against that node's state socket, as an operator would on the node.
func explainOn(c *F.Cluster, n *F.Node, tg F.Target, args ...string) (explainReport, error) {
	dest := tg.Addr + "/" + strings.ToUpper(tg.Proto)
	var r explainReport
	out, err := svcproxyCLI(c, n, append([]string{"explain", dest, "--json"}, args...)...)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return r, fmt.Errorf("svcproxy explain %s on %s: decoding: %w\n%s", dest, n.Name, err, out)
	}
	return r, nil
}

// agrees checks a round of traffic against what explain said: DNAT →
// every request answered, by exactly the listed endpoints (each of them,
// nobody else), and the source the pods saw is the client's own address
// when explain says it is not masqueraded; REJECT → refused.
func agrees(r explainReport, pods []*F.Pod, client string) F.Check {
	return func(rs []F.Result) error {
		switch r.Verdict {
		case "REJECT":
			return F.Refused()(rs)
		case "DNAT":
		default:
			return fmt.Errorf("explain says %s; the scenario checks DNAT and REJECT only", r.Verdict)
		}
		var want []string
		for _, ep := range r.Endpoints {
			i := slices.IndexFunc(pods, func(p *F.Pod) bool { return p.IP+":8080" == ep })
			if i < 0 {
				return fmt.Errorf("explain lists %s, which is none of the scenario's pods", ep)
			}
			want = append(want, pods[i].Name)
		}
		if err := F.AllOf(want...)(rs); err != nil {
			return fmt.Errorf("explain lists %v: %w", want, err)
		}
		for _, res := range rs {
			if !r.Masquerade && res.Src != client {
				return fmt.Errorf("explain says not masqueraded, but %s saw the client %s as %s", res.Pod, client, res.Src)
			}
			if r.Masquerade && res.Src == client {
				return fmt.Errorf("explain says masqueraded, but %s saw the client's own address %s", res.Pod, client)
			}
		}
		return nil
	}
}

// expectExplained asks explain on node n about tg and sends a round of 20
// requests from role `from` (client address client) until both agree; the
// explanation must also satisfy want. Both are measured together, so a
// sync landing between them only costs a retry.
func expectExplained(t *testing.T, c *F.Cluster, n *F.Node, from, client string, tg F.Target, pods []*F.Pod,
	want func(explainReport) error, args ...string) explainReport {
	t.Helper()
	deadline := time.Now().Add(converge)
	for {
		r, err := explainOn(c, n, tg, args...)
		if err == nil {
			if err = want(r); err == nil {
				err = c.Eventually(from, tg, 20, 0, agrees(r, pods, client))
			}
			if err == nil {
				t.Logf("%s on %s: %s", tg, n.Name, r)
				return r
			}
			err = fmt.Errorf("explain: %s\ntraffic disagrees: %w", r, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s from %s after %v: %v", tg, n.Name, from, converge, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// explained returns a predicate on the report: verdict, endpoint count,
// masquerade and a policy fragment.
func explained(verdict string, endpoints int, masq bool, policy string) func(explainReport) error {
	return func(r explainReport) error {
		if r.Verdict != verdict || len(r.Endpoints) != endpoints || r.Masquerade != masq || !strings.Contains(r.Policy, policy) {
			return fmt.Errorf("want %s with %d endpoint(s), masquerade %t, policy %q", verdict, endpoints, masq, policy)
		}
		return nil
	}
}

// testExplain: `svcproxy explain --json`, run on a node against its own
// state socket, agrees with what traffic does: the endpoints it lists are
// exactly the pods that answer, REJECT is a refused connection, and for
// externalTrafficPolicy Local from outside only the node's own endpoint is
// listed (each node's explain reads its own svcproxy) and the pod sees the
// client's own address. The state is on the socket only.
func testExplain(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b, l := c.AddPod(n1, "xa"), c.AddPod(n2, "xb"), c.AddPod(n1, "xl")
	pods := []*F.Pod{a, b, l}
	cli1 := n1.PodNet + ".100"

	web := c.CreateService(F.NewService("xweb", corev1.ServiceTypeClusterIP))
	c.SetEndpoints(web, F.EP{Pod: a}, F.EP{Pod: b})
	local := F.NewService("xlocal", corev1.ServiceTypeNodePort)
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	local = c.CreateService(local)
	c.SetEndpoints(local, F.EP{Pod: l}, F.EP{Pod: b}) // xl on node1, xb on node2
	none := c.CreateService(F.NewService("xnone", corev1.ServiceTypeClusterIP))
	c.SetEndpoints(none)

	for _, tg := range frontends(web, web.Spec.ClusterIP, false) {
		r := expectExplained(t, c, n1, "cli1", cli1, tg, pods, explained("DNAT", 2, false, "Cluster"), "--source", cli1)
		if r.Source != "pod" {
			t.Errorf("%s: explain classifies cli1 (%s) as %s, want pod", tg, cli1, r.Source)
		}
	}
	for _, tg := range frontends(none, none.Spec.ClusterIP, false) {
		r := expectExplained(t, c, n1, "cli1", cli1, tg, pods, explained("REJECT", 0, false, ""), "--from-pod")
		if len(r.Endpoints) != 0 {
			t.Errorf("%s: REJECT with endpoints %v", tg, r.Endpoints)
		}
	}
	for _, n := range []*F.Node{n1, n2} {
		own := map[*F.Node]*F.Pod{n1: l, n2: b}[n]
		for _, tg := range frontends(local, n.IP, true) {
			r := expectExplained(t, c, n, "ext", F.ExtIP, tg, pods, explained("DNAT", 1, false, "externalTrafficPolicy: Local"),
				"--source", F.ExtIP)
			if want := []string{own.IP + ":8080"}; !slices.Equal(r.Endpoints, want) {
				t.Errorf("%s on %s: explain lists %v, want only the local endpoint %v", tg, n.Name, r.Endpoints, want)
			}
			if r.Source != "external" || r.Packet.Source != F.ExtIP {
				t.Errorf("%s on %s: explain sees source %s (%s), want external %s", tg, n.Name, r.Packet.Source, r.Source, F.ExtIP)
			}
		}
	}
	checkStateOnSocketOnly(t, n1)
}

// checkStateOnSocketOnly: the node's metrics port does not serve the state,
// not even on loopback inside the node (where every hostNetwork pod is),
// and the socket is root's alone.
func checkStateOnSocketOnly(t *testing.T, n *F.Node) {
	code, _, err := F.HTTPGet(n.NS, "http://127.0.0.1:10249/debug/svcproxy/state", 5*time.Second)
	if err != nil || code != http.StatusNotFound {
		t.Errorf("GET 127.0.0.1:10249/debug/svcproxy/state on %s: %d %v, want 404", n.Name, code, err)
	}
	if fi, err := os.Lstat(n.StateSocket); err != nil {
		t.Errorf("state socket of %s: %v", n.Name, err)
	} else if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("state socket of %s has mode %v, want a socket with 0600", n.Name, fi.Mode())
	}
}
