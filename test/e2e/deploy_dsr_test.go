package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
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
// Nodes beyond what the base grants.
func deployCheckDSR(ctx context.Context, t *testing.T, c *deployClient, admin *rest.Config, cs kubernetes.Interface) {
	t.Helper()
	deployInstall(ctx, t, c, deployRender(t, "base")) // the ServiceAccount, when run alone
	deployInstall(ctx, t, c, deployRenderComponent(t, "dsr"))
	pc := deployProxyClient(ctx, t, admin, cs)
	const ns, group = "svcproxy-dsr", "coordination.k8s.io"
	var allowed, denied []deployAccess
	for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
		allowed = append(allowed, deployAccess{verb, group, "leases", ns})
		denied = append(denied, deployAccess{verb, group, "leases", "kube-system"})
	}
	denied = append(denied, deployAccess{"patch", "", "nodes", ""}, deployAccess{"deletecollection", group, "leases", ns},
		deployAccess{"create", "", "configmaps", ns})
	deployCheckAccessList(ctx, t, pc, allowed, denied)

	holder := "deploy-test-node"
	leases := pc.CoordinationV1().Leases(ns)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: holder}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kube-proxy cannot advertise: %v", err)
	}
	if _, err := leases.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("kube-proxy cannot list the peers' Leases: %v", err)
	}
	if err := leases.Delete(ctx, holder, metav1.DeleteOptions{}); err != nil {
		t.Errorf("kube-proxy cannot withdraw: %v", err)
	}
	if _, err := pc.CoordinationV1().Leases("kube-system").Create(ctx, lease, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kube-proxy may create a Lease in kube-system: err = %v, want 403 Forbidden", err)
	}
}
