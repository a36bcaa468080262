package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// deployRepoRoot is the svcproxy checkout this nested module lives in.
func deployRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// deployFreePort returns a loopback TCP port that was free a moment ago.
func deployFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// deployControlPlane runs hack/controlplane.sh with its own state directory
// and ports (other tests and the demo may run theirs at the same time), on
// loopback, and stops it when the test ends. It returns the admin config.
func deployControlPlane(t *testing.T) *rest.Config {
	t.Helper()
	root := deployRepoRoot(t)
	run := t.TempDir()
	env := append(os.Environ(), "CP_RUN="+run,
		"KAS_PORT="+strconv.Itoa(deployFreePort(t)), "ETCD_PORT="+strconv.Itoa(deployFreePort(t)))
	script := filepath.Join(root, "hack/controlplane.sh")
	start := time.Now()
	cmd := exec.Command(script, "start")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("starting the control plane: %v\n%s", err, out)
	}
	t.Logf("control plane ready in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		stop := exec.Command(script, "stop")
		stop.Env = env
		if out, err := stop.CombinedOutput(); err != nil {
			t.Errorf("stopping the control plane: %v\n%s", err, out)
		}
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(run, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// deployApply server-side-applies every deploy/*.yaml the kustomization
// lists, as `kubectl apply --server-side -k deploy/` would (the
// kustomization adds only the namespace, which every object already names).
func deployApply(ctx context.Context, t *testing.T, cfg *rest.Config) {
	t.Helper()
	dir := filepath.Join(deployRepoRoot(t), "deploy")
	var k struct {
		Resources []string `json:"resources"`
	}
	deployReadYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
	for _, file := range k.Resources {
		deployApplyFile(ctx, t, cfg, filepath.Join(dir, file))
	}
}

// deployApplyFile applies the one object of path with server-side apply.
func deployApplyFile(ctx context.Context, t *testing.T, cfg *rest.Config, path string) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var obj unstructured.Unstructured
	deployReadYAML(t, path, &obj.Object)
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	_, err = ri.Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: "svcproxy-e2e", Force: true})
	if err != nil {
		t.Fatalf("applying %s (%s %s): %v", path, gvk.Kind, obj.GetName(), err)
	}
}

func deployReadYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// deployProxyClient mints a token for kube-system/kube-proxy (TokenRequest API)
// and returns a client that authenticates with it alone.
func deployProxyClient(ctx context.Context, t *testing.T, admin *rest.Config, cs kubernetes.Interface) kubernetes.Interface {
	t.Helper()
	exp := int64(600)
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "kube-proxy",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for kube-system/kube-proxy: %v", err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	pc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// TestDeployManifests applies deploy/ to a real kube-apiserver and proves,
// with a token of the kube-proxy ServiceAccount, that the RBAC grants what
// svcproxy needs and nothing it does not.
func TestDeployManifests(t *testing.T) {
	t0 := time.Now()
	admin := deployControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deployApply(ctx, t, admin)
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("DaemonSet after apply: %v", err)
	}
	if c := ds.Spec.Template.Spec.Containers[0]; c.Command[0] != "/usr/local/bin/kube-proxy" || ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("DaemonSet as stored: command %q priority %q", c.Command, ds.Spec.Template.Spec.PriorityClassName)
	}
	// A second apply is a no-op for server-side apply: the manifests own
	// their fields cleanly.
	deployApply(ctx, t, admin)
	deployCheckMetricsService(ctx, t, admin, cs)

	pc := deployProxyClient(ctx, t, admin, cs)
	ssr, err := pc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	if u := ssr.Status.UserInfo.Username; u != "system:serviceaccount:kube-system:kube-proxy" {
		t.Fatalf("the token authenticates as %q", u)
	}
	deployCheckAccess(ctx, t, pc)
	deployCheckCalls(ctx, t, cs, pc)
	t.Logf("TestDeployManifests took %v", time.Since(t0).Round(time.Millisecond))
}

// deployCheckMetricsService applies the monitoring pack's Service (its
// ServiceMonitor and PrometheusRule need the Prometheus Operator's CRDs,
// which this API server does not have) and checks it as stored: headless,
// over the DaemonSet's pods, on the metrics port.
func deployCheckMetricsService(ctx context.Context, t *testing.T, admin *rest.Config, cs kubernetes.Interface) {
	t.Helper()
	deployApplyFile(ctx, t, admin, filepath.Join(deployRepoRoot(t), "deploy", "monitoring", "service.yaml"))
	svc, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-proxy-metrics", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the metrics Service after apply: %v", err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector["k8s-app"] != "kube-proxy" ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != 10249 {
		t.Errorf("the metrics Service as stored: clusterIP %q selector %v ports %+v", svc.Spec.ClusterIP, svc.Spec.Selector, svc.Spec.Ports)
	}
}

type deployAccess struct {
	verb, group, resource, namespace string
}

func (a deployAccess) String() string {
	return fmt.Sprintf("%s %s.%s in %q", a.verb, a.resource, a.group, a.namespace)
}

// deployCheckAccess asks SelfSubjectAccessReview about everything svcproxy does
// (must be allowed) and a sample of what it must not do.
func deployCheckAccess(ctx context.Context, t *testing.T, pc kubernetes.Interface) {
	allowed := []deployAccess{
		{"list", "", "services", ""}, {"watch", "", "services", ""},
		{"list", "discovery.k8s.io", "endpointslices", ""}, {"watch", "discovery.k8s.io", "endpointslices", ""},
		{"get", "", "nodes", ""}, {"list", "", "nodes", ""}, {"watch", "", "nodes", ""},
		{"create", "", "events", "default"}, {"patch", "", "events", "default"},
		{"create", "events.k8s.io", "events", "default"}, {"patch", "events.k8s.io", "events", "default"},
	}
	denied := []deployAccess{
		{"list", "", "secrets", ""}, {"get", "", "secrets", "kube-system"},
		{"list", "", "pods", ""}, {"create", "", "services", "default"}, {"update", "", "services", "default"},
		{"delete", "", "nodes", ""}, {"update", "", "nodes", ""}, {"patch", "", "nodes", ""},
		{"create", "discovery.k8s.io", "endpointslices", "default"}, {"delete", "discovery.k8s.io", "endpointslices", "default"},
		{"get", "", "configmaps", "kube-system"}, {"create", "", "serviceaccounts/token", "kube-system"},
		{"update", "apps", "daemonsets", "kube-system"},
	}
	for want, list := range map[bool][]deployAccess{true: allowed, false: denied} {
		for _, a := range list {
			r, err := pc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authv1.SelfSubjectAccessReview{
				Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
					Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SelfSubjectAccessReview %s: %v", a, err)
			}
			if r.Status.Allowed != want {
				t.Errorf("kube-proxy may %s: %t, want %t (%s)", a, r.Status.Allowed, want, r.Status.Reason)
			}
		}
	}
}

// deployCheckCalls makes the calls themselves: the ones svcproxy makes
// succeed, and forbidden ones are refused with 403.
func deployCheckCalls(ctx context.Context, t *testing.T, cs, pc kubernetes.Interface) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-node"}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	must := map[string]error{}
	_, must["list services"] = pc.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	_, must["list endpointslices"] = pc.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	_, must["get node"] = pc.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	_, must["create event"] = pc.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "svcproxy-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node.Name},
		Reason:         "Starting", Message: "deploy test", Type: corev1.EventTypeNormal,
	}, metav1.CreateOptions{})
	w, err := pc.CoreV1().Services("").Watch(ctx, metav1.ListOptions{})
	if err == nil {
		w.Stop()
	}
	must["watch services"] = err
	for what, err := range must {
		if err != nil {
			t.Errorf("kube-proxy cannot %s: %v", what, err)
		}
	}
	forbidden := map[string]error{}
	_, forbidden["list secrets"] = pc.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	_, forbidden["list pods"] = pc.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	_, forbidden["create service"] = pc.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "sneaky"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	_, forbidden["get the kube-proxy ConfigMap"] = pc.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	forbidden["delete node"] = pc.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{})
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("kube-proxy may %s: err = %v, want 403 Forbidden", what, err)
		} else if !strings.Contains(err.Error(), "system:serviceaccount:kube-system:kube-proxy") {
			t.Errorf("%s refused for another user: %v", what, err)
		}
	}
}
