// Package deploy holds the kubeadm-shaped manifests (base/), the components
// that set what differs per cluster and the overlays built from them. Its
// tests check base/'s files, and every build of the overlays and components,
// against svcproxy's own config decoder and kubeadm's DaemonSet shape
// (contract §1.3). test/e2e/deploy_test.go applies them to a real API
// server and checks the RBAC.
package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// load reads one of base/'s manifests.
func load(t *testing.T, file string, into any) {
	t.Helper()
	loadFile(t, filepath.Join("base", file), into)
}

// loadFile decodes deploy/file strictly into into.
func loadFile(t *testing.T, file string, into any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func TestConfigMapDecodesStrictly(t *testing.T) {
	var cm corev1.ConfigMap
	load(t, "configmap.yaml", &cm)
	if cm.Name != "kube-proxy" || cm.Namespace != "kube-system" {
		t.Errorf("ConfigMap %s/%s, want kube-system/kube-proxy", cm.Namespace, cm.Name)
	}
	cfg := completeConfig(t, cm.Data["config.conf"])
	if cfg.Mode != proxy.ModeNFTables || cfg.Versioned.ClientConnection.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" ||
		cfg.HealthzBindAddress != "0.0.0.0:10256" {
		t.Errorf("mode %q kubeconfig %q healthz %q", cfg.Mode, cfg.Versioned.ClientConnection.Kubeconfig, cfg.HealthzBindAddress)
	}
	// As kubeadm: metrics on loopback (components/metrics opens them for
	// Prometheus), and no profiling, which would expose pprof there.
	if cfg.MetricsBindAddress != "127.0.0.1:10249" || cfg.EnableProfiling {
		t.Errorf("metrics %q profiling %v, want kubeadm's 127.0.0.1:10249 without profiling", cfg.MetricsBindAddress, cfg.EnableProfiling)
	}
	kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
	if err != nil {
		t.Fatalf("kubeconfig.conf: %v", err)
	}
	u := kc.AuthInfos["default"]
	if u == nil || u.TokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("kubeconfig user = %+v, want the service account token file", u)
	}
}

// completeConfig decodes a config.conf as svcproxy does with --config,
// strictly, and returns it defaulted, validated and completed.
func completeConfig(t *testing.T, text string) *config.Config {
	t.Helper()
	obj, strictErr, err := config.Decode([]byte(text))
	if err != nil || strictErr != nil {
		t.Fatalf("config.conf: err %v, strict %v", err, strictErr)
	}
	config.SetDefaults(obj)
	if err := config.Validate(obj); err != nil {
		t.Fatalf("config.conf does not validate: %v", err)
	}
	cfg, err := config.Complete(obj)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestDaemonSetIsKubeadms(t *testing.T) {
	var ds appsv1.DaemonSet
	load(t, "daemonset.yaml", &ds)
	if ds.Name != "kube-proxy" || ds.Namespace != "kube-system" || ds.Labels["k8s-app"] != "kube-proxy" ||
		ds.Spec.Template.Labels["k8s-app"] != "kube-proxy" || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("metadata/strategy: %+v %+v", ds.ObjectMeta, ds.Spec.UpdateStrategy)
	}
	checkKubeadmPod(t, &ds)
}

// checkKubeadmPod checks that ds's pods are kubeadm's kube-proxy pods, with
// svcproxy's probes and state directory: whatever name the DaemonSet has,
// svcproxy runs as kube-proxy would.
func checkKubeadmPod(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if spec.PriorityClassName != "system-node-critical" || !spec.HostNetwork || spec.ServiceAccountName != "kube-proxy" ||
		spec.NodeSelector["kubernetes.io/os"] != "linux" ||
		!slices.Equal(spec.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}) {
		t.Errorf("pod spec: %+v", spec)
	}
	c := spec.Containers[0]
	want := []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"}
	if !slices.Equal(c.Command, want) || c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("container: command %q securityContext %+v", c.Command, c.SecurityContext)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("env: %+v", c.Env)
	}
	if p := c.LivenessProbe.HTTPGet; p.Path != "/livez" || p.Port.IntValue() != 10256 {
		t.Errorf("liveness %+v", p)
	}
	if p := c.ReadinessProbe.HTTPGet; p.Path != "/healthz" || p.Port.IntValue() != 10256 {
		t.Errorf("readiness %+v", p)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	if mounts["kube-proxy"].MountPath != "/var/lib/kube-proxy" || vols["kube-proxy"].ConfigMap.Name != "kube-proxy" {
		t.Error("the ConfigMap is not at /var/lib/kube-proxy")
	}
	if x := vols["xtables-lock"].HostPath; x.Path != "/run/xtables.lock" || *x.Type != corev1.HostPathFileOrCreate ||
		mounts["xtables-lock"].MountPath != "/run/xtables.lock" || mounts["xtables-lock"].ReadOnly {
		t.Error("xtables lock: want hostPath /run/xtables.lock FileOrCreate, read-write")
	}
	if st := vols["svcproxy-state"].HostPath; st == nil || st.Path != "/run/svcproxy" || *st.Type != corev1.HostPathDirectoryOrCreate ||
		mounts["svcproxy-state"].MountPath != "/run/svcproxy" || mounts["svcproxy-state"].ReadOnly {
		t.Error("state directory: want hostPath /run/svcproxy DirectoryOrCreate at /run/svcproxy, read-write (the state socket's default directory)")
	}
	if vols["lib-modules"].HostPath.Path != "/lib/modules" || !mounts["lib-modules"].ReadOnly {
		t.Error("want /lib/modules read-only")
	}
}

func TestRBACAndKustomization(t *testing.T) {
	var crb rbacv1.ClusterRoleBinding
	load(t, "clusterrolebinding.yaml", &crb)
	if crb.Name != "kubeadm:node-proxier" || crb.RoleRef.Name != "system:node-proxier" || crb.RoleRef.Kind != "ClusterRole" ||
		len(crb.Subjects) != 1 || crb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "kube-proxy", Namespace: "kube-system"}) {
		t.Errorf("binding: %+v", crb)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Resources  []string `json:"resources"`
		Images     []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	load(t, "kustomization.yaml", &k)
	for _, r := range k.Resources {
		if _, err := os.Stat(filepath.Join("base", r)); err != nil {
			t.Errorf("kustomization resource %s: %v", r, err)
		}
	}
	if len(k.Resources) != 4 || k.Namespace != "kube-system" || len(k.Images) != 1 || k.Images[0].Name != "svcproxy" {
		t.Errorf("kustomization: %+v", k)
	}
	var ds appsv1.DaemonSet
	load(t, "daemonset.yaml", &ds)
	if img := ds.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, k.Images[0].Name) {
		t.Errorf("DaemonSet image %q is not the one kustomize rewrites (%q)", img, k.Images[0].Name)
	}
}
