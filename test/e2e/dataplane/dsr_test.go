package dataplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// dsrNamespace is where the nodes' DSR Leases are (--bpf-dsr-namespace's
// default), as deploy/components/dsr creates it.
const dsrNamespace = "svcproxy-dsr"

// testDSR: with both nodes running --bpf-dsr, each advertises its
// decapsulation with its Lease (under the component's admission policy,
// which lets each write its own only), and a node port annotated for direct
// server return whose only endpoint is on node 2 is served through node 1
// with the client's address kept, over TCP and UDP, while node 2's own
// flows through node 1 are masqueraded; both nodes crash and restart
// under load without a failed request. Node 2's svcproxy stopped no
// longer renews its Lease, and node 1 masquerades once it expires, then
// tunnels again once node 2 goes on. Node 2 restarted
// without --bpf-dsr withdraws its Lease, and node 1 masquerades the
// next connections again, all answered.
func testDSR(t *testing.T, c *F.Cluster) {
	grantDSR(t, c)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	defaults := map[*F.Node][]string{n1: n1.ExtraArgs, n2: n2.ExtraArgs}
	// Node 2 renews every second for 3 s (a test build's knob), so that
	// its Lease expires within converge.
	n2.Bin, n2.BinTC = F.FaultInjectBinary(t), true
	if err := os.Setenv(dsrLeaseTimesEnv, "1s,3s"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.Unsetenv(dsrLeaseTimesEnv)
		n2.Bin, n2.BinTC = "", false
	}()
	restart := func(n *F.Node, args ...string) {
		t.Helper()
		n.Proxy.Stop(10 * time.Second)
		n.ExtraArgs = append(slices.Clone(defaults[n]), args...)
		if err := c.StartProxy(n); err != nil {
			t.Fatal(err)
		}
		waitBothFamiliesSynced(t, c, n)
	}
	defer func() {
		for _, n := range c.Nodes {
			restart(n)
		}
	}()
	restart(n1, "--bpf-dsr")
	restart(n2, "--bpf-dsr")
	waitLeases(t, c, n1.Name, n2.Name)

	pod := c.AddPod(n2, "dsrb")
	svc := F.NewService("dsr", corev1.ServiceTypeNodePort)
	svc.Annotations = map[string]string{"svcproxy.io/external-forwarding": "dsr"}
	svc = c.CreateService(svc)
	c.SetEndpoints(svc, F.EP{Pod: pod})
	for _, tg := range frontends(svc, n1.IP, true) {
		c.Expect("ext", tg, converge, sourceIs(F.AllOf(pod.Name), F.ExtIP))
		// Node 2 is inside the cluster: the pod would answer it beside
		// itself, where no tc program translates the answer, so node 1
		// masquerades its flows instead of tunnelling them.
		c.Expect(fmt.Sprintf("node%d", n2.Index), tg, converge, sourceIs(F.AllOf(pod.Name), n1.IP))
	}
	dsrCrashesUnderLoad(t, c, frontends(svc, n1.IP, true), pod.Name)
	dsrLeaseExpires(t, c, frontends(svc, n1.IP, true), pod.Name)

	restart(n2)
	waitLeases(t, c, n1.Name)
	for _, tg := range frontends(svc, n1.IP, true) {
		c.Expect("ext", tg, converge, sourceIs(F.AllOf(pod.Name), n1.IP))
	}
}

// dsrCrashesUnderLoad: each node's svcproxy killed (SIGKILL) and started
// again, node 1's (which tunnels) and then node 2's (which decapsulates),
// while an outside client keeps connecting to the DSR node port through
// node 1 over TCP and UDP: the pinned programs go on meanwhile and the
// Leases stay, so not one request fails and every one keeps the client's
// address.
func dsrCrashesUnderLoad(t *testing.T, c *F.Cluster, targets []F.Target, pod string) {
	t.Helper()
	var loads []*F.Load
	for _, tg := range targets {
		loads = append(loads, c.StartLoad("ext", tg, 20*time.Millisecond, false))
	}
	time.Sleep(time.Second)
	for _, n := range c.Nodes {
		n.Proxy.Kill()
		time.Sleep(time.Second)
		if err := c.StartProxy(n); err != nil {
			t.Fatal(err)
		}
		waitBothFamiliesSynced(t, c, n)
	}
	time.Sleep(time.Second)
	for i, l := range loads {
		what := fmt.Sprintf("outside → DSR node port %s across both nodes' crashes", targets[i])
		rs := l.Stop()
		noFailures(t, what, rs, 100)
		if err := sourceIs(F.OnlyBy(pod), F.ExtIP)(rs); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
}

// dsrLeaseTimesEnv is what the test build of svcproxy
// (internal/app/faultinject_on.go) takes the DSR Lease's renew period and
// duration from.
const dsrLeaseTimesEnv = "SVCPROXY_E2E_DSR_LEASE"

// dsrLeaseExpires: node 2's svcproxy stopped (SIGSTOP), its Lease stays
// but is no longer renewed; once its duration has passed node 1 no longer
// counts node 2 as a peer and masquerades new flows to its endpoint
// (node 2's pinned programs still decapsulate: only the Lease's expiry
// turns the tunnel off). Continued (SIGCONT), node 2 renews and node 1
// tunnels again.
func dsrLeaseExpires(t *testing.T, c *F.Cluster, targets []F.Target, pod string) {
	t.Helper()
	n1, n2 := c.Nodes[0], c.Nodes[1]
	pid := n2.Proxy.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	for _, tg := range targets {
		c.Expect("ext", tg, converge, sourceIs(F.AllOf(pod), n1.IP))
	}
	if names, err := leaseNames(c); err != nil || !slices.Contains(names, n2.Name) {
		t.Errorf("DSR Leases %v (%v): node 2's went, so the masquerade is not its expiry's", names, err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	for _, tg := range targets {
		c.Expect("ext", tg, converge, sourceIs(F.AllOf(pod), F.ExtIP))
	}
}

// waitLeases waits until the DSR Leases are exactly those of nodes.
func waitLeases(t *testing.T, c *F.Cluster, nodes ...string) {
	t.Helper()
	slices.Sort(nodes)
	var got []string
	deadline := time.Now().Add(converge)
	for time.Now().Before(deadline) {
		var err error
		if got, err = leaseNames(c); err == nil && slices.Equal(got, nodes) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("DSR Leases in %s: %v, want %v", dsrNamespace, got, nodes)
}

func leaseNames(c *F.Cluster) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.Admin.CoordinationV1().Leases(dsrNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the DSR Leases: %w", err)
	}
	var names []string
	for _, l := range list.Items {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	return names, nil
}

// dsrComponent is deploy/components/dsr, which grants kube-proxy's
// ServiceAccount what DSR needs.
const dsrComponent = "../../../deploy/components/dsr"

// kubeProxyUser is the user the component's Role and admission policy
// name: kube-proxy's ServiceAccount.
const kubeProxyUser = "system:serviceaccount:kube-system:kube-proxy"

// grantDSR applies the component dsr's namespace, Role, RoleBinding and
// admission policy, their subject the ServiceAccount svcproxy runs as here
// rather than kube-proxy's, and binds the nodes' tokens to their Nodes:
// the nodes then advertise with exactly the rights an operator's cluster
// gives them, each its own Lease only.
func grantDSR(t *testing.T, c *F.Cluster) {
	t.Helper()
	ctx, cancel := c.Ctx(time.Minute)
	defer cancel()
	var (
		ns      corev1.Namespace
		role    rbacv1.Role
		binding rbacv1.RoleBinding
		policy  admissionv1.ValidatingAdmissionPolicy
		pb      admissionv1.ValidatingAdmissionPolicyBinding
	)
	docs := componentDocs(t, "namespace.yaml", "role.yaml", "policy.yaml")
	for i, into := range []any{&ns, &role, &binding, &policy, &pb} {
		if err := yaml.UnmarshalStrict(docs[i], into); err != nil {
			t.Fatalf("%s document %d: %v", dsrComponent, i, err)
		}
	}
	saNS, saName, _ := strings.Cut(F.ProxyServiceAccount, "/")
	binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: saName, Namespace: saNS}}
	user := "system:serviceaccount:" + saNS + ":" + saName
	for i, mc := range policy.Spec.MatchConditions {
		if !strings.Contains(mc.Expression, kubeProxyUser) {
			t.Fatalf("%s: the policy's match condition %q does not name %s", dsrComponent, mc.Expression, kubeProxyUser)
		}
		policy.Spec.MatchConditions[i].Expression = strings.ReplaceAll(mc.Expression, kubeProxyUser, user)
	}
	created := func(what string, err error) {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating the component's %s: %v", what, err)
		}
	}
	_, err := c.Admin.CoreV1().Namespaces().Create(ctx, &ns, metav1.CreateOptions{})
	created("namespace", err)
	_, err = c.Admin.RbacV1().Roles(role.Namespace).Create(ctx, &role, metav1.CreateOptions{})
	created("Role", err)
	_, err = c.Admin.RbacV1().RoleBindings(binding.Namespace).Create(ctx, &binding, metav1.CreateOptions{})
	created("RoleBinding", err)
	_, err = c.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &policy, metav1.CreateOptions{})
	created("ValidatingAdmissionPolicy", err)
	_, err = c.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &pb, metav1.CreateOptions{})
	created("ValidatingAdmissionPolicyBinding", err)
	if err := c.BindProxyTokensToNodes(); err != nil {
		t.Fatal(err)
	}
	waitPolicyEnforced(t, c, ns.Name)
}

// waitPolicyEnforced waits until the API server enforces the policy (it
// loads a new one asynchronously): a Lease that a token of the proxies'
// ServiceAccount bound to no node would create (dry run) is refused.
func waitPolicyEnforced(t *testing.T, c *F.Cluster, ns string) {
	t.Helper()
	ctx, cancel := c.Ctx(converge)
	defer cancel()
	token, err := c.ProxyToken(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(c.AdminConfig)
	cfg.BearerToken = token
	unbound, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	holder := "policy-probe"
	probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: holder}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	for {
		_, err := unbound.CoordinationV1().Leases(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the DSR admission policy is not enforced after %v: a token bound to no node may write a Lease (err = %v)", converge, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// componentDocs reads the YAML documents of the component dsr's files, in
// order.
func componentDocs(t *testing.T, files ...string) [][]byte {
	t.Helper()
	var docs [][]byte
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dsrComponent, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range strings.Split(string(b), "\n---\n") {
			docs = append(docs, []byte(d))
		}
	}
	if len(docs) != 5 {
		t.Fatalf("%s: %d documents in %v, want a Namespace, a Role, a RoleBinding, a policy and its binding", dsrComponent, len(docs), files)
	}
	return docs
}
