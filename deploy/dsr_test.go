package deploy

import (
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestDSRComponent: components/dsr adds to an ebpf install the namespace
// svcproxy's --bpf-dsr-namespace defaults to, and lets the proxies'
// ServiceAccount do with Leases there what the advertisement and the
// peers' watch need, and nothing else; the rest of the install is as
// without it.
func TestDSRComponent(t *testing.T) {
	fsys := deployFS(t)
	r := mustBuild(t, fsys, writeOverlay(t, fsys, "mode-ebpf+dsr", "../../base", []string{"mode-ebpf", "dsr"}, true))
	ns := config.DefaultDSRNamespace
	wantObjects := append(append([]string{}, baseObjects...), "Namespace/"+ns, "Role/svcproxy:dsr", "RoleBinding/svcproxy:dsr")
	if got := strings.Join(r.objects, " "); got != strings.Join(wantObjects, " ") {
		t.Errorf("objects %q, want %q", r.objects, wantObjects)
	}
	role := r.roles[ns+"/svcproxy:dsr"]
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "list", "watch", "create", "update", "delete"}}}
	if role == nil || !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("role %+v, want leases get/list/watch/create/update/delete in %s", role, ns)
	}
	rb := r.roleBindings[ns+"/svcproxy:dsr"]
	if rb == nil || rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "svcproxy:dsr"}) ||
		len(rb.Subjects) != 1 || rb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "kube-proxy", Namespace: "kube-system"}) {
		t.Errorf("binding %+v, want the Role bound to kube-system/kube-proxy", rb)
	}
	base := baseSettings(t, fsys)
	base.mode = proxy.ModeEBPF
	ds := r.daemonSets["kube-proxy"]
	if got := readSettings(t, r.configMaps["kube-proxy"]); got != base || ds == nil {
		t.Fatalf("config %+v, want mode-ebpf's alone %+v", got, base)
	}
	checkKubeadmPod(t, ds)
	checkAdditions(t, ds, want{settings: base, ebpf: true, image: testImage})
}
