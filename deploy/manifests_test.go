// Package deploy holds the kubeadm-shaped manifests; this test checks them
// against svcproxy's own config decoder and kubeadm's DaemonSet shape
// (contract §1.3). test/e2e/deploy_test.go applies them to a real API
// server and checks the RBAC.
package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/config"
)

func load(t *testing.T, file string, into any) {
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
	obj, strictErr, err := config.Decode([]byte(cm.Data["config.conf"]))
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
	if cfg.Mode != config.ModeNFTables || cfg.Versioned.ClientConnection.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" ||
		cfg.HealthzBindAddress != "0.0.0.0:10256" {
		t.Errorf("mode %q kubeconfig %q healthz %q", cfg.Mode, cfg.Versioned.ClientConnection.Kubeconfig, cfg.HealthzBindAddress)
	}
	// deploy/monitoring scrapes every node's 10249; profiling would expose
	// pprof and the verbosity setter there too.
	if cfg.MetricsBindAddress != "0.0.0.0:10249" || cfg.EnableProfiling {
		t.Errorf("metrics %q profiling %v, want 0.0.0.0:10249 without profiling", cfg.MetricsBindAddress, cfg.EnableProfiling)
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

func TestDaemonSetIsKubeadms(t *testing.T) {
	var ds appsv1.DaemonSet
	load(t, "daemonset.yaml", &ds)
	spec := ds.Spec.Template.Spec
	if ds.Name != "kube-proxy" || ds.Namespace != "kube-system" || ds.Labels["k8s-app"] != "kube-proxy" ||
		ds.Spec.Template.Labels["k8s-app"] != "kube-proxy" || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("metadata/strategy: %+v %+v", ds.ObjectMeta, ds.Spec.UpdateStrategy)
	}
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
		if _, err := os.Stat(r); err != nil {
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
