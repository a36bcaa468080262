package dataplane

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// TestExternalLBAlgorithm: each node decides a node port's external
// balancing from the Service's annotation, else its own
// --external-lb-algorithm, and explain on that node says so; traffic is
// served as before, since nothing routes by maglev yet; an annotation that
// names no algorithm is a Warning Event and leaves each node's default.
func TestExternalLBAlgorithm(t *testing.T) {
	c := withNode1Args(t, "--external-lb-algorithm=maglev")
	defer c.Close()
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "ma"), c.AddPod(n2, "mb")
	pods := []*F.Pod{a, b}
	annotated := func(name, value string) *corev1.Service {
		svc := F.NewService(name, corev1.ServiceTypeNodePort)
		if value != "" {
			svc.Annotations = map[string]string{"svcproxy.io/external-lb-algorithm": value}
		}
		svc = c.CreateService(svc)
		c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})
		return svc
	}
	plain, random, bogus := annotated("mplain", ""), annotated("mrandom", "random"), annotated("mbogus", "ring-hash")
	for _, tc := range []struct {
		n    *F.Node
		svc  *corev1.Service
		want string
	}{
		{n1, plain, "maglev"}, {n1, random, "random"}, {n1, bogus, "maglev"},
		{n2, plain, "random"}, {n2, random, "random"}, {n2, bogus, "random"},
	} {
		tg := frontends(tc.svc, tc.n.IP, true)[0]
		expectExplained(t, c, tc.n, "ext", F.ExtIP, tg, pods, balanced(tc.want), "--source", F.ExtIP)
	}
	expectEvent(t, c, "mbogus", "InvalidExternalLBAlgorithm")
}

// balanced: DNAT to both endpoints, masqueraded (externalTrafficPolicy
// Cluster), with the given balancing.
func balanced(want string) func(explainReport) error {
	dnat := explained("DNAT", 2, true, "")
	return func(r explainReport) error {
		if err := dnat(r); err != nil {
			return err
		}
		if r.Balancing != want {
			return fmt.Errorf("balancing %q, want %q", r.Balancing, want)
		}
		return nil
	}
}
