package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// deployRenderComponent builds deploy/components/NAME alone, through a
// kustomization of a temporary directory that lists only it (a component
// cannot be built by itself).
func deployRenderComponent(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes relative component paths only.
	component, err := filepath.Rel(dir, filepath.Join(deployRepoRoot(t), "deploy", "components", name))
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents: [" + component + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return deployRenderPath(t, dir)
}

// deployCheckDSR applies components/dsr over the base and checks, with
// the kube-proxy ServiceAccount's token, that svcproxy may do with the
// Leases of svcproxy-dsr what --bpf-dsr does (advertise, watch the
// peers', withdraw its own) and nothing with Leases elsewhere, nor with
// Nodes beyond what the base grants; then that the admission policy keeps
// each node to its own Lease.
func deployCheckDSR(ctx context.Context, t *testing.T, c *deployClient, admin *rest.Config, cs kubernetes.Interface) {
	t.Helper()
	deployInstall(ctx, t, c, deployRender(t, "base")) // the ServiceAccount, when run alone
	deployInstall(ctx, t, c, deployRenderComponent(t, "dsr"))
	pc := deployProxyClient(ctx, t, admin, cs)
	const group = "coordination.k8s.io"
	var allowed, denied []deployAccess
	for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
		allowed = append(allowed, deployAccess{verb, group, "leases", deployDSRNamespace})
		denied = append(denied, deployAccess{verb, group, "leases", "kube-system"})
	}
	denied = append(denied, deployAccess{"patch", "", "nodes", ""}, deployAccess{"deletecollection", group, "leases", deployDSRNamespace},
		deployAccess{"create", "", "configmaps", deployDSRNamespace})
	deployCheckAccessList(ctx, t, pc, allowed, denied)

	a := deployNode(ctx, t, cs, "deploy-dsr-a")
	pa := deployBoundProxyClient(ctx, t, admin, cs, &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: a.Name, UID: a.UID})
	ssr, err := pa.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	if got := ssr.Status.UserInfo.Extra[deployNodeNameExtra]; !slices.Equal(got, authnv1.ExtraValue{a.Name}) {
		t.Fatalf("a token bound to Node %s carries %s %q, want the node's name", a.Name, deployNodeNameExtra, got)
	}
	deployWaitPolicy(ctx, t, pc)
	deployCheckOwnLease(ctx, t, cs, pa, pc, a.Name)
	lease := deployLease(a.Name)
	if _, err := pa.CoordinationV1().Leases("kube-system").Create(ctx, lease, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kube-proxy may create a Lease in kube-system: err = %v, want 403 Forbidden", err)
	}
}

const (
	// deployDSRNamespace is where components/dsr has the nodes advertise.
	deployDSRNamespace = "svcproxy-dsr"
	// deployNodeNameExtra is the user extra in which the API server names
	// the node a ServiceAccount token is bound to.
	deployNodeNameExtra = "authentication.kubernetes.io/node-name"
	// deployPolicyDenial and deployNoNodeDenial are in the policy's
	// refusals: a Lease of another node, a token that names none.
	deployPolicyDenial = "may write only its own DSR Lease"
	deployNoNodeDenial = "this request carries no node name"
)

// deployCheckOwnLease: kube-proxy with a token bound to node may create,
// update, list and delete its Lease; it may neither create, update nor
// delete another node's (which an administrator may); and with a token
// bound to no node it may write no Lease at all.
func deployCheckOwnLease(ctx context.Context, t *testing.T, cs, pa, unbound kubernetes.Interface, node string) {
	t.Helper()
	own, admin := pa.CoordinationV1().Leases(deployDSRNamespace), cs.CoordinationV1().Leases(deployDSRNamespace)
	mine, err := own.Create(ctx, deployLease(node), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kube-proxy on %s cannot advertise: %v", node, err)
	}
	mine.Labels = map[string]string{"updated": "yes"}
	if _, err := own.Update(ctx, mine, metav1.UpdateOptions{}); err != nil {
		t.Errorf("kube-proxy on %s cannot update its Lease: %v", node, err)
	}
	if _, err := own.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("kube-proxy cannot list the peers' Leases: %v", err)
	}

	const other = "deploy-dsr-b"
	_, err = own.Create(ctx, deployLease(other), metav1.CreateOptions{})
	deployRefused(t, "kube-proxy on "+node+" creates "+other+"'s Lease", err, deployPolicyDenial)
	theirs, err := admin.Create(ctx, deployLease(other), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) { // kube-proxy's create was let through
		theirs, err = admin.Get(ctx, other, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatalf("an administrator cannot write %s's Lease: %v", other, err)
	}
	theirs.Spec.HolderIdentity = &node
	_, err = own.Update(ctx, theirs, metav1.UpdateOptions{})
	deployRefused(t, "kube-proxy on "+node+" updates "+other+"'s Lease", err, deployPolicyDenial)
	err = own.Delete(ctx, other, metav1.DeleteOptions{})
	deployRefused(t, "kube-proxy on "+node+" deletes "+other+"'s Lease", err, deployPolicyDenial)

	none := unbound.CoordinationV1().Leases(deployDSRNamespace)
	_, err = none.Create(ctx, deployLease("deploy-dsr-c"), metav1.CreateOptions{})
	deployRefused(t, "kube-proxy bound to no node creates a Lease", err, deployNoNodeDenial)
	_, err = none.Update(ctx, theirs, metav1.UpdateOptions{})
	deployRefused(t, "kube-proxy bound to no node updates a Lease", err, deployNoNodeDenial)
	err = none.Delete(ctx, node, metav1.DeleteOptions{})
	deployRefused(t, "kube-proxy bound to no node deletes a Lease", err, deployNoNodeDenial)

	if err := own.Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Errorf("kube-proxy on %s cannot withdraw: %v", node, err)
	}
	// Not kube-proxy: the policy leaves the administrator (and the
	// garbage collector, which deletes a deleted Node's Lease) alone.
	if err := admin.Delete(ctx, other, metav1.DeleteOptions{}); err != nil {
		t.Errorf("an administrator cannot delete %s's Lease: %v", other, err)
	}
}

// deployRefused fails unless err is the policy's 403 with want in its
// message (RBAC's refusal would not do: the Role allows these writes).
func deployRefused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: err = %v, want 403 Forbidden from the policy, saying %q", what, err, want)
	}
}

// deployWaitPolicy waits, for a while, until the API server enforces the
// policy it loads asynchronously: a Lease a token bound to no node would
// create (dry run) is refused. It goes on after the while regardless, so
// that without the policy the checks say what was allowed.
func deployWaitPolicy(ctx context.Context, t *testing.T, unbound kubernetes.Interface) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := unbound.CoordinationV1().Leases(deployDSRNamespace).Create(ctx, deployLease("policy-probe"),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("the policy is not enforced after 20 s (a dry-run write without a node: err = %v)", err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// deployNode creates (or gets) the Node name, for a token to be bound to.
func deployNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatalf("Node %s: %v", name, err)
	}
	return node
}

// deployLease is the Lease node advertises with, as svcproxy writes it.
func deployLease(node string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &node}}
}
