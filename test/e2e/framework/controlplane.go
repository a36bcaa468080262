package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// proxySA is the ServiceAccount svcproxy runs as, bound to the bootstrap
// ClusterRole system:node-proxier exactly as kubeadm binds kube-proxy's.
const proxySA = "svcproxy-e2e"

// ProxyServiceAccount is the namespace and name of the ServiceAccount
// svcproxy runs as, for a test that grants it what a deploy/ component
// grants kube-proxy's.
const ProxyServiceAccount = "kube-system/" + proxySA

// controlPlane runs hack/controlplane.sh for this cluster: etcd and
// kube-apiserver inside the cp namespace, the API on 198.18.0.1:6443 only.
// Service ranges are dual-stack, IPv4 first; a seeded etcd from a
// single-stack run is upgraded by the API server's default-ServiceCIDR
// controller, and its Services keep their IPv4 ClusterIPs.
func (c *Cluster) controlPlane(verb string, extraEnv ...string) error {
	cmd := exec.Command(filepath.Join(c.Bins.Root, "hack", "controlplane.sh"), verb)
	cmd.Env = append(os.Environ(), "CP_RUN="+c.cpRun, "CP_NETNS="+c.NS("cp"), "KAS_BIND="+CPIP,
		"KAS_PORT="+strconv.Itoa(kasPort), "SVC_CIDR="+c.ServiceCIDR4()+","+ServiceCIDR6)
	cmd.Env = append(cmd.Env, extraEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("hack/controlplane.sh %s: %w\n%s", verb, err, out)
	}
	return nil
}

func (c *Cluster) startControlPlane() error {
	t0 := time.Now()
	var env []string
	if c.Opts.SeedDir != "" {
		env = append(env, "SEED_DIR="+c.Opts.SeedDir)
	}
	if err := c.controlPlane("start", env...); err != nil {
		return err
	}
	c.T.Logf("control plane up in %v", time.Since(t0).Round(time.Millisecond))
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(c.cpRun, "admin.kubeconfig"))
	if err != nil {
		return fmt.Errorf("admin kubeconfig: %w", err)
	}
	// The test process lives in the root namespace; the API exists only
	// inside the cp namespace, so the client dials from there.
	cfg.Dial = DialerIn(c.NS("cp"))
	cfg.Timeout = 20 * time.Second
	cfg.QPS, cfg.Burst = 200, 400
	c.AdminConfig = rest.CopyConfig(cfg)
	c.Admin, err = kubernetes.NewForConfig(cfg)
	return err
}

// EtcdDataDir is the running etcd's data dir; after StopAPIServer it is a
// consistent copy source for Options.SeedDir.
func (c *Cluster) EtcdDataDir() string { return filepath.Join(c.cpRun, "etcd-data") }

func (c *Cluster) stopControlPlane() {
	if err := c.controlPlane("stop"); err != nil {
		c.T.Errorf("stopping the control plane: %v", err)
	}
}

// StopAPIServer stops etcd and kube-apiserver (the data dir stays).
func (c *Cluster) StopAPIServer() error { return c.controlPlane("stop") }

// StartAPIServer starts them again on the same data, certificates and keys,
// so the ServiceAccount tokens the nodes hold stay valid.
func (c *Cluster) StartAPIServer() error { return c.controlPlane("start", "KEEP_DATA=1") }

// setupRBAC creates kube-system/svcproxy-e2e bound to system:node-proxier
// and writes one kubeconfig per node with a token from the TokenRequest API.
func (c *Cluster) setupRBAC() error {
	ctx, cancel := c.Ctx(30 * time.Second)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: proxySA, Namespace: "kube-system"}}
	// A seeded etcd (Options.SeedDir) may hold these already; tokens are
	// fresh anyway, signed by this run's service-account key.
	if _, err := c.Admin.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return fmt.Errorf("ServiceAccount: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: proxySA + ":node-proxier"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: proxySA, Namespace: "kube-system"}},
	}
	if _, err := c.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return fmt.Errorf("ClusterRoleBinding: %w", err)
	}
	for _, n := range c.Nodes {
		token, err := c.ProxyToken(ctx, nil)
		if err != nil {
			return fmt.Errorf("TokenRequest for %s: %w", n.Name, err)
		}
		n.Kubecfg = filepath.Join(c.Work, n.Name+".kubeconfig")
		if err := os.WriteFile(n.Kubecfg, []byte(c.tokenKubeconfig(token)), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// BindProxyTokensToNodes gives every node a new kubeconfig whose token is
// bound to its Node, as a kubelet's projected token is bound to a Pod on
// it: the API server then names the node in the requests' user extra
// authentication.kubernetes.io/node-name, which deploy/components/dsr's
// admission policy needs. Proxies started afterwards use it. Such a token
// dies with its Node, so only scenarios that keep their Nodes call this.
func (c *Cluster) BindProxyTokensToNodes() error {
	ctx, cancel := c.Ctx(30 * time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("Node %s: %w", n.Name, err)
		}
		ref := &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
		token, err := c.ProxyToken(ctx, ref)
		if err != nil {
			return fmt.Errorf("TokenRequest bound to Node %s: %w", n.Name, err)
		}
		if err := os.WriteFile(n.Kubecfg, []byte(c.tokenKubeconfig(token)), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ProxyToken requests a token of the ServiceAccount svcproxy runs as,
// bound to ref (nil: to nothing), valid as long as the cluster may run.
func (c *Cluster) ProxyToken(ctx context.Context, ref *authnv1.BoundObjectReference) (string, error) {
	exp := int64(4 * 3600)
	tr, err := c.Admin.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, proxySA, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp, BoundObjectRef: ref}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (c *Cluster) tokenKubeconfig(token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://%s:%d
    certificate-authority: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
users:
- name: %s
  user:
    token: %s
`, CPIP, kasPort, filepath.Join(c.cpRun, "pki", "ca.crt"), proxySA, proxySA, token)
}

// registerNode creates the Node object and sets the status a kubelet
// would (no kubelet runs): InternalIPs, Ready, zone label, podCIDRs, each
// in both families. A seeded Node keeps its spec (podCIDRs are immutable).
func (c *Cluster) registerNode(n *Node) error {
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
			"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux",
			corev1.LabelTopologyZone: n.Zone,
		}},
		Spec: corev1.NodeSpec{PodCIDR: n.PodNet + ".0/24", PodCIDRs: []string{n.PodNet + ".0/24", n.PodNet6 + "/64"}},
	}
	created, err := c.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) { // from a seeded etcd: refresh its status
		created, err = c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("Node %s: %w", n.Name, err)
	}
	node = created
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP},
		{Type: corev1.NodeInternalIP, Address: n.IP6}, {Type: corev1.NodeHostName, Address: n.Name}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "E2E", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	_, err = c.Admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// ControlPlanePIDs returns the pids of etcd and kube-apiserver, as
// hack/controlplane.sh recorded them (missing ones left out).
func (c *Cluster) ControlPlanePIDs() []int {
	var pids []int
	for _, name := range []string{"etcd", "kube-apiserver"} {
		b, err := os.ReadFile(filepath.Join(c.cpRun, name+".pid"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
