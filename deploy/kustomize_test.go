package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// rendered is what a kustomization builds, decoded strictly into the API
// types (a misspelt field in a patch fails the decode).
type rendered struct {
	configMaps map[string]*corev1.ConfigMap
	daemonSets map[string]*appsv1.DaemonSet
	// roles and roleBindings are by namespace/name (components/dsr's).
	roles        map[string]*rbacv1.Role
	roleBindings map[string]*rbacv1.RoleBinding
	// policies and policyBindings are by name (components/dsr's).
	policies       map[string]*admissionv1.ValidatingAdmissionPolicy
	policyBindings map[string]*admissionv1.ValidatingAdmissionPolicyBinding
	// objects is every object as kind/name, in the build's order.
	objects []string
}

// deployFS copies deploy/'s manifests into an in-memory file system under
// /deploy, where the tests write their own overlays beside the shipped ones
// without touching the checkout.
func deployFS(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/deploy", filepath.ToSlash(p)), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// build runs kustomize on dir as `kubectl kustomize` does (default options:
// files only from inside each kustomization's root, no plugins).
func build(fsys filesys.FileSystem, dir string) (*rendered, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, err
	}
	out := &rendered{configMaps: map[string]*corev1.ConfigMap{}, daemonSets: map[string]*appsv1.DaemonSet{},
		roles: map[string]*rbacv1.Role{}, roleBindings: map[string]*rbacv1.RoleBinding{},
		policies: map[string]*admissionv1.ValidatingAdmissionPolicy{}, policyBindings: map[string]*admissionv1.ValidatingAdmissionPolicyBinding{}}
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		var into any
		switch r.GetKind() {
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			out.configMaps[r.GetName()], into = cm, cm
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			out.daemonSets[r.GetName()], into = ds, ds
		case "ServiceAccount":
			into = &corev1.ServiceAccount{}
		case "ClusterRoleBinding":
			into = &rbacv1.ClusterRoleBinding{}
		case "Namespace":
			into = &corev1.Namespace{}
		case "Role":
			role := &rbacv1.Role{}
			out.roles[r.GetNamespace()+"/"+r.GetName()], into = role, role
		case "RoleBinding":
			rb := &rbacv1.RoleBinding{}
			out.roleBindings[r.GetNamespace()+"/"+r.GetName()], into = rb, rb
		case "ValidatingAdmissionPolicy":
			p := &admissionv1.ValidatingAdmissionPolicy{}
			out.policies[r.GetName()], into = p, p
		case "ValidatingAdmissionPolicyBinding":
			pb := &admissionv1.ValidatingAdmissionPolicyBinding{}
			out.policyBindings[r.GetName()], into = pb, pb
		default:
			return nil, fmt.Errorf("unexpected %s %s", r.GetKind(), r.GetName())
		}
		if err := yaml.UnmarshalStrict(data, into); err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.GetKind(), r.GetName(), err)
		}
		out.objects = append(out.objects, r.GetKind()+"/"+r.GetName())
	}
	return out, nil
}

func mustBuild(t *testing.T, fsys filesys.FileSystem, dir string) *rendered {
	t.Helper()
	r, err := build(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return r
}

// settings are the values of config.conf and kubeconfig.conf that the
// components set.
type settings struct {
	mode    proxy.Mode
	server  string // kubeconfig.conf's server
	cidrs   string // clusterCIDR, as config.conf has it
	metrics string // the completed metricsBindAddress
}

// want is what an install (the base, with or without components) must
// render to.
type want struct {
	settings
	metricsPort bool // the metrics component's container port
	resources   bool // the resources component's requests and limit
	ebpf        bool // mode-ebpf's flags and mounts
	image       string
}

// readSettings decodes cm as svcproxy would and returns the values the
// components set. Whatever components set, svcproxy must accept the config
// as it is, and health stays where kubeadm has it, without profiling.
func readSettings(t *testing.T, cm *corev1.ConfigMap) settings {
	t.Helper()
	cfg := completeConfig(t, cm.Data["config.conf"])
	if cfg.HealthzBindAddress != "0.0.0.0:10256" || cfg.EnableProfiling {
		t.Errorf("config: healthz %q profiling %v, want 0.0.0.0:10256 without profiling", cfg.HealthzBindAddress, cfg.EnableProfiling)
	}
	cidrs := make([]string, len(cfg.ClusterCIDRs))
	for i, p := range cfg.ClusterCIDRs {
		cidrs[i] = p.String()
	}
	kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
	if err != nil {
		t.Fatalf("kubeconfig.conf: %v", err)
	}
	c := kc.Clusters["default"]
	if c == nil || kc.AuthInfos["default"] == nil {
		t.Fatalf("kubeconfig.conf: no default cluster or user: %+v", kc)
	}
	return settings{mode: cfg.Mode, server: c.Server, cidrs: strings.Join(cidrs, ","), metrics: cfg.MetricsBindAddress}
}

// baseSettings are the base's own values, which an install keeps where no
// component changes them.
func baseSettings(t *testing.T, fsys filesys.FileSystem) settings {
	t.Helper()
	return readSettings(t, mustBuild(t, fsys, "/deploy/base").configMaps["kube-proxy"])
}

// baseObjects are the objects of every install: kubeadm's.
var baseObjects = []string{"ServiceAccount/kube-proxy", "ClusterRoleBinding/kubeadm:node-proxier",
	"ConfigMap/kube-proxy", "DaemonSet/kube-proxy"}

// checkInstall checks a build of the base and components against w: the
// objects kubeadm creates and nothing else (the settings stay out), a
// config.conf that svcproxy accepts with the values w names, and kubeadm's
// pod with only what the components add.
func checkInstall(t *testing.T, r *rendered, w want) {
	t.Helper()
	if strings.Join(r.objects, " ") != strings.Join(baseObjects, " ") {
		t.Errorf("objects %q, want %q", r.objects, baseObjects)
	}
	cm, ds := r.configMaps["kube-proxy"], r.daemonSets["kube-proxy"]
	if cm == nil || ds == nil || cm.Namespace != "kube-system" || ds.Namespace != "kube-system" {
		t.Fatalf("want kube-system/kube-proxy ConfigMap and DaemonSet, have %q", r.objects)
	}
	if got := readSettings(t, cm); got != w.settings {
		t.Errorf("config: %+v, want %+v", got, w.settings)
	}
	if ds.Name != "kube-proxy" || ds.Labels["k8s-app"] != "kube-proxy" || ds.Spec.Selector.MatchLabels["k8s-app"] != "kube-proxy" {
		t.Errorf("DaemonSet %s labels %v selector %v, want kubeadm's", ds.Name, ds.Labels, ds.Spec.Selector)
	}
	checkKubeadmPod(t, ds)
	checkAdditions(t, ds, w)
}

// checkAdditions checks what the metrics and resources components add to
// the container, and the image.
func checkAdditions(t *testing.T, ds *appsv1.DaemonSet, w want) {
	t.Helper()
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Image != w.image {
		t.Errorf("image %q, want %q", c.Image, w.image)
	}
	wantPorts := 0
	if w.metricsPort {
		wantPorts = 1
		if p := c.Ports; len(p) != 1 || p[0].Name != "metrics" || p[0].ContainerPort != 10249 || p[0].Protocol != corev1.ProtocolTCP {
			t.Errorf("ports %+v, want metrics 10249/TCP", p)
		}
	}
	if len(c.Ports) != wantPorts {
		t.Errorf("ports %+v, want %d", c.Ports, wantPorts)
	}
	checkEBPFMounts(t, ds, w.ebpf)
	res := c.Resources
	if !w.resources {
		if len(res.Requests)+len(res.Limits) != 0 {
			t.Errorf("resources %+v, want none (kubeadm's)", res)
		}
		return
	}
	// Memory only is limited (see the component); requests fit under the limit.
	if res.Requests.Cpu().IsZero() || res.Requests.Memory().IsZero() || len(res.Limits) != 1 ||
		res.Limits.Memory().Cmp(*res.Requests.Memory()) <= 0 {
		t.Errorf("resources %+v, want cpu and memory requests, and a memory limit above the request", res)
	}
}

// TestOverlays builds each shipped overlay as it is, and fails on an
// overlay it does not know: a new one gets its expectations here.
func TestOverlays(t *testing.T) {
	fsys := deployFS(t)
	base := baseSettings(t, fsys)
	nft, ipt := base, base
	ipt.mode, ipt.metrics = proxy.ModeIPTables, "0.0.0.0:10249"
	installs := map[string]want{
		"nftables": {settings: nft, resources: true, image: "svcproxy:dev"},
		"iptables": {settings: ipt, metricsPort: true, image: "svcproxy:dev"},
	}
	dirs, err := os.ReadDir("overlays")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		t.Run(d.Name(), func(t *testing.T) {
			r := mustBuild(t, fsys, "/deploy/overlays/"+d.Name())
			if d.Name() == "canary" {
				checkCanary(t, r, "svcproxy:dev", false)
				return
			}
			w, ok := installs[d.Name()]
			if !ok {
				t.Fatalf("overlays/%s: not known to this test", d.Name())
			}
			checkInstall(t, r, w)
		})
	}
}
