// Package framework builds a throwaway cluster out of network namespaces for
// svcproxy's end-to-end tests: a real etcd + kube-apiserver (hack/
// controlplane.sh, inside its own namespace), nodes running the real
// svcproxy binary with a KubeProxyConfiguration file and a token of a
// ServiceAccount bound to system:node-proxier, pods running podserver,
// client pods and a client outside the cluster.
//
//	<p>net     bridge br0: the node network 198.18.0.0/24 and
//	           fd00:198:18::/64, no addresses
//	<p>cp      etcd (own loopback) + kube-apiserver on 198.18.0.1:6443
//	<p>nodeN   198.18.0.1N and fd00:198:18::1N, pods 10.244.N.0/24 and
//	           fd00:10:244:N::/64, svcproxy as node-N, zone-a/zone-b
//	<p>cliN    client pod 10.244.N.100 and fd00:10:244:N::100 on nodeN
//	<p>ext     198.18.0.100 and fd00:198:18::100, outside the cluster;
//	           externalIPs (198.18.1.0/24) and LB IPs (198.18.2.0/24) are
//	           routed to node1
//	<p>pod-X   pods, added by the tests (AddPod)
//
// The cluster is dual-stack, IPv4 first: a Service without ipFamilyPolicy
// gets an IPv4 ClusterIP, as in a single-stack cluster. IPv6 addresses are
// all ULA (fd00::/8), and pods route only fd00::/8 to their node.
//
// Nothing is programmed in the root namespace and no namespace has a route
// off the machine. Everything is removed in t.Cleanup, whatever happened.
package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	NodeNet     = "198.18.0"
	CPIP        = NodeNet + ".1"
	ExtIP       = NodeNet + ".100"
	ExternalNet = "198.18.1" // spec.externalIPs live here (routed to node1 from ext)
	LBNet       = "198.18.2" // status.loadBalancer.ingress IPs live here
	// ServiceCIDR is the IPv4 service range unless Options.ServiceCIDR
	// says otherwise: 65,534 ClusterIPs.
	ServiceCIDR = "10.96.0.0/16"
	// ServiceCIDR6 is the secondary service range. kube-apiserver takes an
	// IPv6 range of up to 20 host bits (/108) whatever its feature gates.
	ServiceCIDR6 = "fd00:10:96::/108"
	// ClusterCIDR is the config's clusterCIDR: both families, so that
	// svcproxy tells pod traffic from outside traffic in each.
	// Node N's pods are in fd00:10:244:N::/64.
	ClusterCIDR = "10.244.0.0/16,fd00:10:244::/56"
	NodeNet6    = "fd00:198:18::" // a /64
	ExtIP6      = NodeNet6 + "100"
	kasPort     = 6443
)

// Options shape one cluster.
type Options struct {
	Mode       string        // nftables or iptables
	Nodes      int           // default 2
	SyncPeriod time.Duration // default 5s: the "rules deleted by a third party" tests wait for it
	// MinSyncPeriod, when set ("1ms", "2s"), goes into the config's
	// iptables/nftables minSyncPeriod; empty keeps kube-proxy's default (1s),
	// and so does "0s": v1alpha1 defaulting treats 0 as unset.
	MinSyncPeriod string
	// SeedDir is an etcd data dir to start from (hack/controlplane.sh
	// SEED_DIR): objects that take minutes to create through the API.
	SeedDir string
	// NoProxy leaves svcproxy stopped: the caller starts it (StartProxy),
	// e.g. to time its start against objects already in the API.
	NoProxy bool
	// FaultInject runs svcproxy built with -tags faultinject: the backend
	// refuses the rules of Services named kernel-poison* as a kernel would
	// refuse a normalization bug's (pkg/testing/faultinject). Test-only.
	FaultInject bool
	// ExtraConfig is appended to every node's KubeProxyConfiguration
	// (top-level YAML fields: featureGates, nodePortAddresses, …).
	ExtraConfig string
	// ServiceCIDR is the IPv4 service range, default ServiceCIDR; a larger
	// one (kube-apiserver takes up to a /12) for more Services than a /16
	// holds. The nodes route it as they route the default.
	ServiceCIDR string
	// ForeignProxy: the proxy binary is not this tree's svcproxy (upstream
	// kube-proxy, an older svcproxy to compare with), so StartProxy gives
	// it kube-proxy's flags only: no --state-socket.
	ForeignProxy bool
	// TCInterfaces: nodes in ebpf mode also run the experimental tc
	// programs on these interfaces of theirs (--bpf-tc-interfaces).
	TCInterfaces []string
	// Acceleration is their --bpf-acceleration (native, best-effort;
	// "" keeps svcproxy's default, disabled): np_xdp in front of the tc
	// programs. The node links' peers on the bridge then take XDP frames.
	Acceleration string
	// KeepWork keeps a passed test's work dir as a failed one's is
	// kept (without the etcd data): what a benchmark wrote there
	// (profiles) is its output.
	KeepWork bool
}

// ServiceCIDR4 is the cluster's IPv4 service range (Options.ServiceCIDR).
func (c *Cluster) ServiceCIDR4() string {
	if c.Opts.ServiceCIDR != "" {
		return c.Opts.ServiceCIDR
	}
	return ServiceCIDR
}

// Cluster is one running test cluster.
type Cluster struct {
	T      testing.TB
	Opts   Options
	Prefix string
	Work   string // state dir: configs, kubeconfigs, logs
	Bins   Binaries
	Admin  kubernetes.Interface
	// AdminConfig is Admin's client config (dialing into the cp namespace),
	// for callers that need their own client (rate limits, protobuf).
	AdminConfig *rest.Config
	Nodes       []*Node

	cpRun string
	// cgroupMount is the cgroup2 mount under Work in ebpf mode.
	cgroupMount string
	// xdpPass and xdpLinks: the XDP program on the node links' peers, with
	// acceleration (takeXDPFrames).
	xdpPass    *ebpf.Program
	xdpLinks   []link.Link
	closeOnce  sync.Once
	namespaces []string
	pods       map[string]*Pod
	podSeq     int
}

// New builds and starts a whole cluster; t.Cleanup removes it.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the e2e suite needs root (network namespaces); run it through make test / hack/e2e.sh")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	if opts.SyncPeriod == 0 {
		opts.SyncPeriod = 5 * time.Second
	}
	c := &Cluster{T: t, Opts: opts, Bins: buildBinaries(t), pods: map[string]*Pod{}}
	c.Prefix = nsPrefix()
	c.Work = workDir(t, c.Bins.Root, c.Prefix)
	c.cpRun = filepath.Join(c.Work, "cp")
	t.Cleanup(c.Close)
	t0 := time.Now()
	c.must(c.buildTopology(), "topology")
	c.must(c.startControlPlane(), "control plane")
	c.must(c.setupRBAC(), "RBAC for svcproxy")
	for _, n := range c.Nodes {
		c.must(c.registerNode(n), "Node "+n.Name)
	}
	if !opts.NoProxy {
		c.startProxies()
	}
	t.Logf("cluster %s (%s, %d nodes) up in %v; logs in %s", c.Prefix, opts.Mode, len(c.Nodes),
		time.Since(t0).Round(time.Millisecond), c.Work)
	return c
}

func (c *Cluster) startProxies() {
	c.T.Helper()
	for _, n := range c.Nodes {
		c.must(c.StartProxy(n), "svcproxy on "+n.Name)
	}
	for _, n := range c.Nodes {
		c.must(c.WaitHealthz(n, 200, 60*time.Second), "svcproxy healthy on "+n.Name)
	}
}

func (c *Cluster) must(err error, what string) {
	c.T.Helper()
	if err != nil {
		c.T.Fatalf("%s: %v", what, err)
	}
}

// nsPrefix is E2E_NS_PREFIX plus a random part: hack/e2e.sh sets the first
// part so that it can clean up after a killed test binary.
func nsPrefix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	base := os.Getenv("E2E_NS_PREFIX")
	if base == "" {
		base = "sve"
	}
	return base + hex.EncodeToString(b) + "-"
}

// workDir keeps logs under _output/e2e/<prefix> so that a failed run can be
// read afterwards; it is small (configs, kubeconfigs, logs, a tiny etcd).
func workDir(t testing.TB, root, prefix string) string {
	dir := filepath.Join(root, "_output", "e2e", prefix[:len(prefix)-1])
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// NS returns the full namespace name of a role ("node1", "ext", "pod-a").
func (c *Cluster) NS(role string) string { return c.Prefix + role }

func (c *Cluster) addNS(role string) error {
	name := c.NS(role)
	c.namespaces = append(c.namespaces, name)
	return addNS(name)
}

// Close stops every process and deletes every namespace of this cluster.
// It runs in t.Cleanup anyway; calling it earlier is allowed.
func (c *Cluster) Close() { c.closeOnce.Do(c.teardown) }

func (c *Cluster) teardown() {
	for _, n := range c.Nodes {
		if n.Proxy != nil {
			n.Proxy.Stop(3 * time.Second)
		}
	}
	for _, p := range c.pods {
		p.Proc.Kill()
	}
	c.stopControlPlane()
	for _, ns := range namespacesWithPrefix(c.Prefix) {
		if err := deleteNS(ns); err != nil {
			c.T.Errorf("teardown: %v", err)
		}
	}
	if left := namespacesWithPrefix(c.Prefix); len(left) > 0 {
		c.T.Errorf("teardown: namespaces left: %v", left)
	}
	c.teardownEBPF()
	c.teardownXDP()
	// A failed test keeps its logs for reading (without the etcd data, the only big thing);
	// a passed one leaves nothing behind unless asked to.
	if c.T.Failed() || c.Opts.KeepWork {
		_ = os.RemoveAll(filepath.Join(c.cpRun, "etcd-data"))
		return
	}
	_ = os.RemoveAll(c.Work)
}

// Ctx is a context bounded for one API call or wait.
func (c *Cluster) Ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func (c *Cluster) logPath(name string) string {
	return filepath.Join(c.Work, "logs", name+".log")
}

// Errorf-style helper that names the cluster's mode.
func (c *Cluster) String() string { return fmt.Sprintf("%s cluster %s", c.Opts.Mode, c.Prefix) }
