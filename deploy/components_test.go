package deploy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The values the test overlays set, other than the shipped overlays' (a
// component that did nothing would leave those).
const (
	testServer = "https://198.51.100.7:6443"
	testCIDRs  = "10.99.0.0/16,fd00:99::/56"
	testImage  = "registry.test/svcproxy@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// writeOverlay writes the kustomization of a test overlay
// /deploy/overlays/test-NAME (beside the shipped ones, as an operator's
// copy would be) over resource with these components, the image pinned by
// digest, and a settings ConfigMap unless settings is false. It returns its
// directory.
func writeOverlay(t *testing.T, fsys filesys.FileSystem, name, resource string, components []string, settings bool) string {
	t.Helper()
	dir := "/deploy/overlays/test-" + strings.ReplaceAll(name, "+", "_")
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + resource + "]\n"
	if len(components) > 0 {
		k += "components: [../../components/" + strings.Join(components, ", ../../components/") + "]\n"
	}
	if settings {
		k += fmt.Sprintf(`configMapGenerator:
  - name: svcproxy-settings
    literals: [apiServer=%s, "clusterCIDR=%s"]
    options:
      disableNameSuffixHash: true
      annotations: {config.kubernetes.io/local-config: "true"}
`, testServer, testCIDRs)
	}
	repo, digest, _ := strings.Cut(testImage, "@")
	k += fmt.Sprintf("images: [{name: svcproxy, newName: %s, digest: %q}]\n", repo, digest)
	if err := fsys.WriteFile(dir+"/kustomization.yaml", []byte(k)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestComponentCombinations builds the base with every combination of the
// components (one mode or none, and any of the others) and checks that each
// component did its part and nothing else.
func TestComponentCombinations(t *testing.T) {
	fsys := deployFS(t)
	modes := []struct {
		component string
		mode      proxy.Mode
	}{{"", proxy.ModeNFTables}, {"mode-iptables", proxy.ModeIPTables}, {"mode-ipvs", proxy.ModeIPVS}, {"mode-ebpf", proxy.ModeEBPF}}
	others := []string{"api-endpoint", "pod-cidr", "metrics", "resources"}
	base := baseSettings(t, fsys)
	if base.mode != proxy.ModeNFTables || base.server == testServer || base.cidrs == testCIDRs {
		t.Fatalf("the base has %+v: the components would not show", base)
	}
	for _, m := range modes {
		for set := range 1 << len(others) {
			var components []string
			if m.component != "" {
				components = append(components, m.component)
			}
			has := map[string]bool{}
			for i, c := range others {
				if set&(1<<i) != 0 {
					components = append(components, c)
					has[c] = true
				}
			}
			name := strings.Join(components, "+")
			if name == "" {
				name = "none"
			}
			t.Run(name, func(t *testing.T) {
				w := want{settings: base, metricsPort: has["metrics"], resources: has["resources"], ebpf: m.mode == proxy.ModeEBPF, image: testImage}
				w.mode = m.mode
				if has["api-endpoint"] {
					w.server = testServer
				}
				if has["pod-cidr"] {
					w.cidrs = testCIDRs
				}
				if has["metrics"] {
					w.metrics = "0.0.0.0:10249"
				}
				dir := writeOverlay(t, fsys, name, "../../base", components, true)
				checkInstall(t, mustBuild(t, fsys, dir), w)
			})
		}
	}
}

// TestSettingsAreRequired: the components that read the cluster's values
// fail the build without them, rather than leave the base's placeholders.
func TestSettingsAreRequired(t *testing.T) {
	fsys := deployFS(t)
	for _, c := range []string{"api-endpoint", "pod-cidr"} {
		_, err := build(fsys, writeOverlay(t, fsys, "unset-"+c, "../../base", []string{c}, false))
		if err == nil || !strings.Contains(err.Error(), "svcproxy-settings") {
			t.Errorf("%s without svcproxy-settings: err = %v, want one naming it", c, err)
		}
	}
}

// TestCanaryCompositions: the canary takes the components that change its
// DaemonSet, and refuses those that would change a config it does not carry
// (it runs with the cluster's kube-proxy ConfigMap).
func TestCanaryCompositions(t *testing.T) {
	fsys := deployFS(t)
	checkCanary(t, mustBuild(t, fsys, writeOverlay(t, fsys, "canary-resources", "../canary", []string{"resources"}, false)),
		testImage, true)
	for _, c := range []string{"mode-iptables", "mode-ipvs", "mode-ebpf", "api-endpoint", "pod-cidr", "metrics"} {
		_, err := build(fsys, writeOverlay(t, fsys, "canary-"+c, "../canary", []string{c}, true))
		if err == nil || !strings.Contains(err.Error(), "ConfigMap.[noVer].[noGrp]/kube-proxy") {
			t.Errorf("canary with %s: err = %v, want the missing kube-proxy ConfigMap", c, err)
		}
	}
}

// checkCanary checks a build of the canary overlay: the svcproxy-canary
// DaemonSet, on the labelled nodes only, with kube-proxy's pod and the
// cluster's ConfigMap and ServiceAccount; and of kube-proxy's DaemonSet
// exactly the affinity that keeps it off those nodes.
func checkCanary(t *testing.T, r *rendered, image string, resources bool) {
	t.Helper()
	if got := strings.Join(r.objects, " "); got != "DaemonSet/svcproxy-canary DaemonSet/kube-proxy" {
		t.Fatalf("objects %q, want the two DaemonSets only", got)
	}
	ds := r.daemonSets["svcproxy-canary"]
	if ds.Namespace != "kube-system" || ds.Labels["k8s-app"] != "svcproxy-canary" || ds.Labels["app.kubernetes.io/name"] != "svcproxy" ||
		!reflect.DeepEqual(ds.Spec.Selector.MatchLabels, map[string]string{"k8s-app": "svcproxy-canary"}) ||
		!reflect.DeepEqual(ds.Spec.Template.Labels, map[string]string{"k8s-app": "svcproxy-canary"}) {
		t.Errorf("svcproxy-canary: namespace %q labels %v selector %v template labels %v", ds.Namespace, ds.Labels,
			ds.Spec.Selector, ds.Spec.Template.Labels)
	}
	if sel := ds.Spec.Template.Spec.NodeSelector; !reflect.DeepEqual(sel, map[string]string{"kubernetes.io/os": "linux", "svcproxy.io/canary": "true"}) {
		t.Errorf("svcproxy-canary nodeSelector %v", sel)
	}
	checkKubeadmPod(t, ds)
	checkAdditions(t, ds, want{resources: resources, image: image})

	kp := r.daemonSets["kube-proxy"]
	off := corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "svcproxy.io/canary", Operator: corev1.NodeSelectorOpDoesNotExist}},
		}}},
	}}}
	if kp.Namespace != "kube-system" || len(kp.Labels)+len(kp.Annotations) != 0 || kp.Spec.Selector != nil ||
		len(kp.Spec.Template.Labels) != 0 || !reflect.DeepEqual(kp.Spec.Template.Spec, off) {
		t.Errorf("kube-proxy's DaemonSet: want only the affinity that keeps it off the canary nodes, have %+v", kp)
	}
}

// checkEBPFMounts checks what mode-ebpf adds to the pod: the flags that
// point svcproxy at the host's cgroup hierarchy and bpffs, and those two
// hostPath mounts; without it, none of them.
func checkEBPFMounts(t *testing.T, ds *appsv1.DaemonSet, ebpf bool) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	vols := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v.HostPath
	}
	if !ebpf {
		if len(c.Args) != 0 || vols["cgroup"] != nil || vols["bpffs"] != nil {
			t.Errorf("args %q volumes %+v: want no ebpf flags or mounts without mode-ebpf", c.Args, spec.Volumes)
		}
		return
	}
	// Not /sys/fs/cgroup: in the container that may be a cgroup namespace
	// of its own, and the hooks would see svcproxy's sockets only.
	wantArgs := []string{"--bpf-cgroup-root=/host/sys/fs/cgroup", "--bpf-pin-dir=/sys/fs/bpf/svcproxy"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %q, want %q", c.Args, wantArgs)
	}
	if v := vols["cgroup"]; v == nil || v.Path != "/sys/fs/cgroup" || *v.Type != corev1.HostPathDirectory ||
		mounts["cgroup"].MountPath != "/host/sys/fs/cgroup" || !mounts["cgroup"].ReadOnly {
		t.Errorf("cgroup: want the host's /sys/fs/cgroup read-only at /host/sys/fs/cgroup, have %+v %+v", v, mounts["cgroup"])
	}
	// Read-write: svcproxy pins there, and the pins outlive the pod.
	if v := vols["bpffs"]; v == nil || v.Path != "/sys/fs/bpf" || *v.Type != corev1.HostPathDirectoryOrCreate ||
		mounts["bpffs"].MountPath != "/sys/fs/bpf" || mounts["bpffs"].ReadOnly {
		t.Errorf("bpffs: want the host's /sys/fs/bpf read-write at /sys/fs/bpf, have %+v %+v", v, mounts["bpffs"])
	}
}
