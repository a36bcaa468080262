package deploy

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/svcproxy/svcproxy/internal/config"
)

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor
// that monitoring/servicemonitor.yaml uses (decoded strictly: a field
// outside it fails the test rather than go unchecked).
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		JobLabel          string `json:"jobLabel"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type scrapeConfig struct {
	JobName             string `json:"job_name"`
	ScrapeInterval      string `json:"scrape_interval"`
	KubernetesSDConfigs []struct {
		Role       string `json:"role"`
		Namespaces struct {
			Names []string `json:"names"`
		} `json:"namespaces"`
	} `json:"kubernetes_sd_configs"`
	RelabelConfigs []struct {
		SourceLabels []string `json:"source_labels"`
		Regex        string   `json:"regex"`
		Action       string   `json:"action"`
		TargetLabel  string   `json:"target_label"`
	} `json:"relabel_configs"`
}

// jobName is the job every alert and the kubernetes-mixin select.
const jobName = "kube-proxy"

// TestMonitoringScrapesTheDaemonSet checks that the scrape setup reaches
// the DaemonSet's metrics port under job="kube-proxy": the Service selects
// its pods on the port the metrics component binds, the ServiceMonitor's job label
// and the plain scrape config both name the job.
func TestMonitoringScrapesTheDaemonSet(t *testing.T) {
	var ds appsv1.DaemonSet
	load(t, "daemonset.yaml", &ds)
	var svc corev1.Service
	loadFile(t, "monitoring/service.yaml", &svc)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) ||
		svc.Namespace != ds.Namespace || svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 {
		t.Fatalf("the Service %s/%s (selector %v, clusterIP %q) is not a headless Service over the DaemonSet's pods",
			svc.Namespace, svc.Name, svc.Spec.Selector, svc.Spec.ClusterIP)
	}
	port := svc.Spec.Ports[0]
	if want := metricsPort(t); port.TargetPort.IntValue() != want {
		t.Errorf("the Service targets port %s, metricsBindAddress is on %d", port.TargetPort.String(), want)
	}

	var sm serviceMonitor
	loadFile(t, "monitoring/servicemonitor.yaml", &sm)
	if svc.Labels[sm.Spec.JobLabel] != jobName {
		t.Errorf("ServiceMonitor jobLabel %q: the Service's value %q, want %q", sm.Spec.JobLabel, svc.Labels[sm.Spec.JobLabel], jobName)
	}
	if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) ||
		len(sm.Spec.NamespaceSelector.MatchNames) != 1 || sm.Spec.NamespaceSelector.MatchNames[0] != svc.Namespace {
		t.Errorf("the ServiceMonitor does not select the Service: %+v", sm.Spec)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != port.Name {
		t.Errorf("ServiceMonitor endpoints %+v, want the Service's port %q", sm.Spec.Endpoints, port.Name)
	}

	var scrape []scrapeConfig
	loadFile(t, "monitoring/scrape-config.yaml", &scrape)
	if len(scrape) != 1 || scrape[0].JobName != jobName || len(scrape[0].RelabelConfigs) == 0 {
		t.Fatalf("scrape-config.yaml: want one job %q with relabelings, got %+v", jobName, scrape)
	}
	keep := scrape[0].RelabelConfigs[0]
	if keep.Action != "keep" || keep.Regex != svc.Name+";"+port.Name {
		t.Errorf("scrape-config.yaml keeps %q (%s), want the Service %q's port %q", keep.Regex, keep.Action, svc.Name, port.Name)
	}
}

// metricsPort is the port of metricsBindAddress in the base built with the
// metrics component, which the monitoring pack needs.
func metricsPort(t *testing.T) int {
	t.Helper()
	fsys := deployFS(t)
	overlay := "resources:\n  - ../base\ncomponents:\n  - ../components/metrics\n"
	if err := fsys.WriteFile("/deploy/with-metrics/kustomization.yaml", []byte(overlay)); err != nil {
		t.Fatal(err)
	}
	cm := mustBuild(t, fsys, "/deploy/with-metrics").configMaps["kube-proxy"]
	if cm == nil {
		t.Fatal("no kube-proxy ConfigMap in the base with the metrics component")
	}
	obj, _, err := config.Decode([]byte(cm.Data["config.conf"]))
	if err != nil {
		t.Fatal(err)
	}
	_, p, err := net.SplitHostPort(obj.MetricsBindAddress)
	if err != nil {
		t.Fatalf("metricsBindAddress %q: %v", obj.MetricsBindAddress, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMonitoringKustomization(t *testing.T) {
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Resources  []string `json:"resources"`
	}
	loadFile(t, "monitoring/kustomization.yaml", &k)
	if k.Namespace != "kube-system" || len(k.Resources) != 3 {
		t.Errorf("kustomization: %+v", k)
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(filepath.Join("monitoring", r)); err != nil {
			t.Errorf("kustomization resource %s: %v", r, err)
		}
	}
}
