package deploy

import (
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestDSRComponent: components/dsr adds to an ebpf install the namespace
// svcproxy's --bpf-dsr-namespace defaults to, lets the proxies'
// ServiceAccount do with Leases there what the advertisement and the
// peers' watch need, and nothing else, and binds the policy that keeps
// each node to its own Lease; the rest of the install is as without it.
func TestDSRComponent(t *testing.T) {
	fsys := deployFS(t)
	r := mustBuild(t, fsys, writeOverlay(t, fsys, "mode-ebpf+dsr", "../../base", []string{"mode-ebpf", "dsr"}, true))
	ns := config.DefaultDSRNamespace
	wantObjects := append(append([]string{}, baseObjects...), "Namespace/"+ns, "Role/svcproxy:dsr", "RoleBinding/svcproxy:dsr",
		"ValidatingAdmissionPolicy/"+dsrPolicy, "ValidatingAdmissionPolicyBinding/"+dsrPolicy)
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
	checkDSRPolicy(t, r, ns)
	base := baseSettings(t, fsys)
	base.mode = proxy.ModeEBPF
	ds := r.daemonSets["kube-proxy"]
	if got := readSettings(t, r.configMaps["kube-proxy"]); got != base || ds == nil {
		t.Fatalf("config %+v, want mode-ebpf's alone %+v", got, base)
	}
	checkKubeadmPod(t, ds)
	checkAdditions(t, ds, want{settings: base, ebpf: true, image: testImage})
}

// dsrPolicy names components/dsr's admission policy and its binding.
const dsrPolicy = "svcproxy-dsr-own-lease"

// checkDSRPolicy checks what the policy matches, as the API server will
// read it: every write of a Lease in ns by the ServiceAccount the Role is
// bound to, and nothing else (what it allows of those, the CEL, only a
// real API server can tell: test/e2e's TestDeployManifests). Its binding
// denies, never only warns or audits.
func checkDSRPolicy(t *testing.T, r *rendered, ns string) {
	t.Helper()
	p, pb := r.policies[dsrPolicy], r.policyBindings[dsrPolicy]
	if p == nil || pb == nil {
		t.Fatalf("want the policy and binding %s, have %v %v", dsrPolicy, r.policies, r.policyBindings)
	}
	mc := p.Spec.MatchConstraints
	wantRules := []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete},
		Rule:       admissionv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leases"}},
	}}}
	if mc == nil || !reflect.DeepEqual(mc.ResourceRules, wantRules) || mc.NamespaceSelector == nil ||
		!reflect.DeepEqual(mc.NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": ns}) ||
		len(mc.NamespaceSelector.MatchExpressions) != 0 || mc.ObjectSelector != nil || len(mc.ExcludeResourceRules) != 0 {
		t.Errorf("policy matches %+v, want every write of a Lease in %s", mc, ns)
	}
	wantCond := `request.userInfo.username == "system:serviceaccount:kube-system:kube-proxy"`
	if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != wantCond {
		t.Errorf("policy match conditions %+v, want only kube-proxy's requests: %s", p.Spec.MatchConditions, wantCond)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail || p.Spec.ParamKind != nil || len(p.Spec.Validations) == 0 {
		t.Errorf("policy failurePolicy %v paramKind %v validations %d, want Fail, none, some",
			p.Spec.FailurePolicy, p.Spec.ParamKind, len(p.Spec.Validations))
	}
	for _, v := range p.Spec.Validations {
		if v.Reason == nil || *v.Reason != metav1.StatusReasonForbidden {
			t.Errorf("validation %q: reason %v, want Forbidden (svcproxy tells a refusal by 403)", v.Expression, v.Reason)
		}
	}
	if pb.Spec.PolicyName != dsrPolicy || !reflect.DeepEqual(pb.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		pb.Spec.ParamRef != nil || pb.Spec.MatchResources != nil {
		t.Errorf("binding %+v, want the policy as it is, denying", pb.Spec)
	}
}
