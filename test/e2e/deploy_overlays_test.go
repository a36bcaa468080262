package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// kubectlManager is the field manager of `kubectl apply --server-side`.
const kubectlManager = "kubectl"

// deployOverlays lists deploy/overlays but the canary, which needs a
// kube-proxy DaemonSet created as kubeadm creates it.
func deployOverlays(t *testing.T) []string {
	t.Helper()
	dirs, err := os.ReadDir(filepath.Join(deployRepoRoot(t), "deploy", "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	var overlays []string
	for _, d := range dirs {
		if d.Name() != "canary" {
			overlays = append(overlays, d.Name())
		}
	}
	return overlays
}

// deployInstall applies objs, checks that the API server stored each as
// given, and applies them again: server-side apply of the same manifests
// must not change anything (no resourceVersion moves).
func deployInstall(ctx context.Context, t *testing.T, c *deployClient, objs []*unstructured.Unstructured) {
	t.Helper()
	versions := map[string]string{}
	for _, obj := range objs {
		id := obj.GetKind() + " " + obj.GetName()
		if _, err := c.apply(ctx, obj, kubectlManager, false); err != nil {
			t.Fatalf("applying %s: %v", id, err)
		}
		stored, err := c.get(ctx, obj)
		if err != nil {
			t.Fatalf("%s after apply: %v", id, err)
		}
		for _, d := range deployDiff(obj.GetKind(), obj.Object, stored.Object) {
			t.Errorf("%s as stored: %s", id, d)
		}
		versions[id] = stored.GetResourceVersion()
	}
	for _, obj := range objs {
		id := obj.GetKind() + " " + obj.GetName()
		again, err := c.apply(ctx, obj, kubectlManager, false)
		if err != nil {
			t.Fatalf("applying %s again: %v", id, err)
		}
		if again.GetResourceVersion() != versions[id] {
			t.Errorf("applying %s again changed it (resourceVersion %s -> %s)", id, versions[id], again.GetResourceVersion())
		}
	}
}

// deployDiff lists where have lacks or differs from what want sets. An
// absent field in have matches a zero value in want: the API server does
// not store those (readOnly: false).
func deployDiff(at string, want, have any) []string {
	switch w := want.(type) {
	case map[string]any:
		h, _ := have.(map[string]any)
		var out []string
		for k, v := range w {
			hv, ok := h[k]
			if !ok && (v == nil || reflect.ValueOf(v).IsZero()) {
				continue
			}
			out = append(out, deployDiff(at+"."+k, v, hv)...)
		}
		return out
	case []any:
		h, _ := have.([]any)
		if len(h) != len(w) {
			return []string{fmt.Sprintf("%s: %d items, want %d", at, len(h), len(w))}
		}
		var out []string
		for i := range w {
			out = append(out, deployDiff(fmt.Sprintf("%s[%d]", at, i), w[i], h[i])...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, have) {
			return []string{fmt.Sprintf("%s: %v, want %v", at, have, want)}
		}
		return nil
	}
}

// canaryOnEmpty: on a cluster without kube-proxy's DaemonSet, the canary's
// patch of it is refused (it is not a whole DaemonSet), as its comment says.
func canaryOnEmpty(ctx context.Context, t *testing.T, c *deployClient) {
	t.Helper()
	for _, obj := range deployRender(t, "overlays/canary") {
		if obj.GetName() != "kube-proxy" {
			continue
		}
		if _, err := c.apply(ctx, obj, kubectlManager, false); !apierrors.IsInvalid(err) {
			t.Errorf("the canary's kube-proxy patch without a kube-proxy DaemonSet: err = %v, want Invalid", err)
		}
		return
	}
	t.Fatal("the canary overlay has no kube-proxy DaemonSet patch")
}

// deployCanary replaces kube-proxy's DaemonSet by one created as kubeadm
// does (another manager, upstream's image), applies the canary overlay over
// it and checks where each DaemonSet's pods may run.
func deployCanary(ctx context.Context, t *testing.T, c *deployClient, cs kubernetes.Interface) {
	dsc := cs.AppsV1().DaemonSets("kube-system")
	if err := dsc.Delete(ctx, "kube-proxy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var ours *unstructured.Unstructured
	for _, obj := range deployRender(t, "base") {
		if obj.GetKind() == "DaemonSet" {
			ours = obj
		}
	}
	var kubeadm appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ours.DeepCopy().Object, &kubeadm); err != nil {
		t.Fatal(err)
	}
	delete(kubeadm.Labels, "app.kubernetes.io/name")
	kubeadm.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/kube-proxy:v1.37.1"
	before, err := dsc.Create(ctx, &kubeadm, metav1.CreateOptions{FieldManager: "kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	// Replacing kubeadm's DaemonSet by svcproxy's takes --force-conflicts:
	// kubeadm owns the fields it set (deploy/README.md says so).
	if _, err := c.apply(ctx, ours, kubectlManager, false); !apierrors.IsConflict(err) {
		t.Errorf("applying svcproxy's DaemonSet over kubeadm's: err = %v, want a conflict", err)
	}
	deployInstall(ctx, t, c, deployRender(t, "overlays/canary"))

	after, err := dsc.Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := after.Spec.DeepCopy()
	kept.Template.Spec.Affinity = nil
	if !reflect.DeepEqual(*kept, before.Spec) || !reflect.DeepEqual(after.Labels, before.Labels) {
		t.Errorf("the canary changed more of kube-proxy's DaemonSet than its affinity:\nbefore labels %v, %+v\nafter  labels %v, %+v",
			before.Labels, before.Spec, after.Labels, after.Spec)
	}
	canary, err := dsc.Get(ctx, "svcproxy-canary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the canary's pods use is the cluster's own.
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err != nil {
		t.Errorf("the canary's ConfigMap: %v", err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err != nil {
		t.Errorf("the canary's ServiceAccount: %v", err)
	}
	deployCheckPlacement(t, after, canary)
}

// deployCheckPlacement checks, with the scheduler's own node-affinity
// matching, that on a node labelled svcproxy.io/canary=true only the
// canary's pods may run, and elsewhere only kube-proxy's.
func deployCheckPlacement(t *testing.T, kubeProxy, canary *appsv1.DaemonSet) {
	t.Helper()
	node := func(labels map[string]string) *corev1.Node {
		labels["kubernetes.io/os"] = "linux"
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	}
	nodes := map[string]*corev1.Node{
		"a canary node": node(map[string]string{"svcproxy.io/canary": "true"}),
		"another node":  node(map[string]string{}),
	}
	want := map[string]map[string]bool{
		"kube-proxy":      {"a canary node": false, "another node": true},
		"svcproxy-canary": {"a canary node": true, "another node": false},
	}
	for _, ds := range []*appsv1.DaemonSet{kubeProxy, canary} {
		pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
		for name, n := range nodes {
			match, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(n)
			if err != nil {
				t.Fatal(err)
			}
			if match != want[ds.Name][name] {
				t.Errorf("%s's pods may run on %s: %t, want %t", ds.Name, name, match, want[ds.Name][name])
			}
		}
	}
}
