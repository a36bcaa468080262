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
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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

// deployRender builds the kustomization deploy/DIR with kustomize's Go
// library, the one kubectl embeds (`kubectl apply -k` runs the same build
// before it sends the objects): no kubectl binary is needed.
func deployRender(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	return deployRenderPath(t, filepath.Join(deployRepoRoot(t), "deploy", dir))
}

// deployRenderPath builds the kustomization in dir, as deployRender.
func deployRenderPath(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			t.Fatalf("%s: %s %s: %v", dir, r.GetKind(), r.GetName(), err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// deployClient reaches any kind of object the manifests hold.
type deployClient struct {
	mapper meta.RESTMapper
	dyn    dynamic.Interface
}

func newDeployClient(t *testing.T, cfg *rest.Config) *deployClient {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &deployClient{mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), dyn: dyn}
}

func (c *deployClient) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
	}
	return c.dyn.Resource(m.Resource), nil
}

// apply server-side-applies obj as manager; force takes over fields that
// another manager owns (kubectl's --force-conflicts).
func (c *deployClient) apply(ctx context.Context, obj *unstructured.Unstructured, manager string, force bool) (*unstructured.Unstructured, error) {
	ri, err := c.resource(obj)
	if err != nil {
		return nil, err
	}
	return ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: manager, Force: force})
}

// get returns the stored object of obj's kind, namespace and name.
func (c *deployClient) get(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := c.resource(obj)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// deployProxyClient mints a token for kube-system/kube-proxy (TokenRequest API)
// and returns a client that authenticates with it alone.
func deployProxyClient(ctx context.Context, t *testing.T, admin *rest.Config, cs kubernetes.Interface) kubernetes.Interface {
	t.Helper()
	return deployBoundProxyClient(ctx, t, admin, cs, nil)
}

// deployBoundProxyClient is deployProxyClient with the token bound to ref,
// as a kubelet binds a Pod's.
func deployBoundProxyClient(ctx context.Context, t *testing.T, admin *rest.Config, cs kubernetes.Interface,
	ref *authnv1.BoundObjectReference) kubernetes.Interface {
	t.Helper()
	exp := int64(600)
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "kube-proxy",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp, BoundObjectRef: ref}}, metav1.CreateOptions{})
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

// TestDeployManifests applies deploy/base, then every overlay of
// deploy/overlays, to one real kube-apiserver, one after the other as
// `kubectl apply --server-side -k` does (without --force-conflicts), and
// checks what the API server stored: every field the manifests set, a second
// apply that changes nothing, and, with a token of the kube-proxy
// ServiceAccount, that the RBAC grants what svcproxy needs and nothing it
// does not; then components/dsr, whose Role grants the Leases of
// svcproxy-dsr alone, and whose admission policy lets a token bound to a
// node write that node's Lease alone. The canary overlay goes last, over a kube-proxy DaemonSet
// created as kubeadm creates it.
func TestDeployManifests(t *testing.T) {
	t0 := time.Now()
	admin := deployControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	c := newDeployClient(t, admin)
	canaryOnEmpty(ctx, t, c)
	t.Run("base", func(t *testing.T) {
		deployInstall(ctx, t, c, deployRender(t, "base"))
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
	})
	for _, o := range deployOverlays(t) {
		t.Run(o, func(t *testing.T) {
			deployInstall(ctx, t, c, deployRender(t, "overlays/"+o))
			deployCheckAccess(ctx, t, deployProxyClient(ctx, t, admin, cs))
		})
	}
	t.Run("dsr", func(t *testing.T) { deployCheckDSR(ctx, t, c, admin, cs) })
	t.Run("canary", func(t *testing.T) { deployCanary(ctx, t, c, cs) })
	t.Run("monitoring", func(t *testing.T) { deployCheckMetricsService(ctx, t, c, cs) })
	t.Logf("TestDeployManifests took %v", time.Since(t0).Round(time.Millisecond))
}

// deployCheckMetricsService applies the monitoring pack's Service (its
// ServiceMonitor and PrometheusRule need the Prometheus Operator's CRDs,
// which this API server does not have) and checks it as stored: headless,
// over the DaemonSet's pods, on the metrics port.
func deployCheckMetricsService(ctx context.Context, t *testing.T, c *deployClient, cs kubernetes.Interface) {
	t.Helper()
	applied := 0
	for _, obj := range deployRender(t, "monitoring") {
		if obj.GetKind() != "Service" {
			continue
		}
		if _, err := c.apply(ctx, obj, "kubectl", false); err != nil {
			t.Fatalf("applying the metrics Service: %v", err)
		}
		applied++
	}
	if applied != 1 {
		t.Fatalf("deploy/monitoring holds %d Services, want the metrics one", applied)
	}
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
	deployCheckAccessList(ctx, t, pc, allowed, denied)
}

// deployCheckAccessList asks SelfSubjectAccessReview about each of allowed
// (must be allowed) and denied (must not).
func deployCheckAccessList(ctx context.Context, t *testing.T, pc kubernetes.Interface, allowed, denied []deployAccess) {
	t.Helper()
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
