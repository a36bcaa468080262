package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Node is one "node": a namespace on the node network running svcproxy.
type Node struct {
	Name    string // the Node object's name, node-N
	Index   int
	NS      string
	IP      string
	IP6     string // fd00:198:18::1N
	PodNet  string // 10.244.N
	PodNet6 string // fd00:10:244:N:: (a /64)
	Zone    string
	Proxy   *Proc
	Config  string // KubeProxyConfiguration file
	Mode    string // this node's proxy mode when SwitchMode changed it
	// Bin, when set, is the proxy binary StartProxy runs on this node
	// instead of the cluster's (an older svcproxy to upgrade from, the
	// fault-injecting build): one node changes image, as a rollout does.
	Bin     string
	Kubecfg string // per-node kubeconfig with a ServiceAccount token
	// StateSocket is this node's svcproxy --state-socket, for `svcproxy
	// explain` (empty with Options.ForeignProxy).
	StateSocket string
	// ExtraArgs are appended to this node's svcproxy command line (not
	// with Options.ForeignProxy): svcproxy's extension flags.
	ExtraArgs []string
	lastPod   int // last host number given to a pod in PodNet
	ebpf      *ebpfNode
}

// Pod is a namespace behind a node running podserver on :8080 (TCP + UDP).
type Pod struct {
	Name   string
	NS     string
	IP     string
	IP6    string
	Node   *Node
	Proc   *Proc
	hostIf string
}

// Binaries are the programs the suite runs.
type Binaries struct {
	Root, SvcProxy, E2ECtl, PodServer string
}

var (
	binOnce sync.Once
	bins    Binaries
	binErr  error
)

// buildBinaries builds svcproxy (or takes SVCPROXY_BIN) and the test tools
// once per test binary. A missing binary is a failure, not a skip.
func buildBinaries(t testing.TB) Binaries {
	binOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join(moduleDir(), "..", ".."))
		if err != nil {
			binErr = err
			return
		}
		dir := filepath.Join(root, "_output", "e2e", "bin")
		bins = Binaries{Root: root, SvcProxy: os.Getenv("SVCPROXY_BIN"),
			E2ECtl: filepath.Join(dir, "e2ectl"), PodServer: filepath.Join(dir, "podserver")}
		if binErr = os.MkdirAll(dir, 0o755); binErr != nil {
			return
		}
		binErr = goBuild(filepath.Join(root, "test", "e2e"), dir+"/", "./cmd/e2ectl", "./cmd/podserver")
		if binErr == nil && bins.SvcProxy == "" {
			bins.SvcProxy = filepath.Join(dir, "svcproxy")
			binErr = goBuild(root, bins.SvcProxy, "./cmd/svcproxy")
		}
	})
	if binErr != nil {
		t.Fatalf("building the binaries: %v", binErr)
	}
	return bins
}

// buildOnce is a binary built at most once per test binary.
type buildOnce struct {
	once sync.Once
	path string
	err  error
}

// get returns the binary build makes, built on the first call; a failed
// build fails t, and every later caller.
func (b *buildOnce) get(t testing.TB, what string, build func() (string, error)) string {
	b.once.Do(func() { b.path, b.err = build() })
	if b.err != nil {
		t.Fatalf("building %s: %v", what, b.err)
	}
	return b.path
}

var (
	faultBin buildOnce
	prevMu   sync.Mutex
	prevBin  = map[string]*buildOnce{}
)

// FaultInjectBinary builds svcproxy with -tags faultinject, once per test
// binary (never SVCPROXY_BIN: that is a release build).
func FaultInjectBinary(t testing.TB) string {
	return faultBin.get(t, "svcproxy -tags faultinject", func() (string, error) {
		bins := buildBinaries(t)
		out := filepath.Join(filepath.Dir(bins.E2ECtl), "svcproxy-faultinject")
		return out, goBuild(bins.Root, out, "-tags", "faultinject", "./cmd/svcproxy")
	})
}

// PreviousBinary is the earlier svcproxy pinned for mode in
// hack/tools/svcproxy-previous-MODE, else in hack/tools/svcproxy-previous,
// built by hack/build-svcproxy-at.sh (cached under _output/svcproxy-at;
// hack/e2e.sh builds them before go test), once per mode and test binary.
// A missing build is a failure, not a skip.
func PreviousBinary(t testing.TB, mode string) string {
	prevMu.Lock()
	b, ok := prevBin[mode]
	if !ok {
		b = &buildOnce{}
		prevBin[mode] = b
	}
	prevMu.Unlock()
	return b.get(t, "the previous svcproxy of "+mode+" mode", func() (string, error) {
		cmd := exec.Command(filepath.Join(buildBinaries(t).Root, "hack", "build-svcproxy-at.sh"), "--previous", mode)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("hack/build-svcproxy-at.sh --previous %s: %w\n%s", mode, err, stderr.String())
		}
		return strings.TrimSpace(string(out)), nil
	})
}

// goBuild runs go build -o out args in dir; args are packages, or flags
// before them.
func goBuild(dir, out string, args ...string) error {
	pkgs := args
	cmd := exec.Command("go", append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v in %s: %w\n%s", pkgs, dir, err, b)
	}
	return nil
}

// moduleDir finds test/e2e: go test runs in the package dir, a
// subdirectory of the module.
func moduleDir() string {
	dir, _ := os.Getwd()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}

// buildTopology creates the bridge, the control-plane namespace, the nodes
// with routes to each other's pod networks, a client pod per node and the
// external client.
func (c *Cluster) buildTopology() error {
	if err := c.addNS("net"); err != nil {
		return err
	}
	br := c.NS("net")
	if err := ip("-n", br, "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if err := ip("-n", br, "link", "set", "br0", "up"); err != nil {
		return err
	}
	if err := c.attach("cp", CPIP+"/24"); err != nil {
		return err
	}
	for i := 1; i <= c.Opts.Nodes; i++ {
		if err := c.addNode(i); err != nil {
			return err
		}
	}
	if err := c.routePods(); err != nil {
		return err
	}
	if err := c.attach("ext", ExtIP+"/24", ExtIP6+"/64"); err != nil {
		return err
	}
	for _, net := range []string{ExternalNet, LBNet} {
		if err := ip("-n", c.NS("ext"), "route", "add", net+".0/24", "via", c.Nodes[0].IP); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.plumbPod(n, fmt.Sprintf("cli%d", n.Index), n.PodNet+".100", n.PodNet6+"100"); err != nil {
			return err
		}
	}
	return nil
}

// routePods adds the routes between nodes to each other's pod networks, in
// both families, as a CNI would add them.
func (c *Cluster) routePods() error {
	for _, a := range c.Nodes {
		for _, b := range c.Nodes {
			if a == b {
				continue
			}
			if err := ip("-n", a.NS, "route", "add", b.PodNet+".0/24", "via", b.IP); err != nil {
				return err
			}
			if err := ip("-n", a.NS, "route", "add", b.PodNet6+"/64", "via", b.IP6); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cluster) addNode(i int) error {
	n := &Node{Name: fmt.Sprintf("node-%d", i), Index: i, NS: c.NS(fmt.Sprintf("node%d", i)),
		IP: fmt.Sprintf("%s.%d", NodeNet, 10+i), IP6: fmt.Sprintf("%s%d", NodeNet6, 10+i),
		PodNet: fmt.Sprintf("10.244.%d", i), PodNet6: fmt.Sprintf("fd00:10:244:%d::", i),
		Zone: map[bool]string{true: "zone-a", false: "zone-b"}[i == 1]}
	c.Nodes = append(c.Nodes, n)
	if err := c.attach(fmt.Sprintf("node%d", i), n.IP+"/24", n.IP6+"/64"); err != nil {
		return err
	}
	if c.acceleration() != "" {
		if err := c.takeXDPFrames("p-node" + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	if _, err := InNS(context.Background(), n.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1",
		"net.ipv6.conf.all.forwarding=1"); err != nil {
		return err
	}
	// A real node has a default route, so a packet to a ClusterIP without
	// rules passes routing and meets iptables' filter REJECT in FORWARD;
	// without any route it would die in routing first (a soft ICMP error a
	// TCP client only sees as a timeout). Send the service ranges onto the
	// bridge, where nothing answers for them (like netnstest's VIP sink).
	if err := ip("-n", n.NS, "route", "add", c.ServiceCIDR4(), "dev", "eth0"); err != nil {
		return err
	}
	return ip("-n", n.NS, "route", "add", ServiceCIDR6, "dev", "eth0")
}

// attach creates namespace role and connects it to the bridge with addrs
// (CIDR notation, one per family).
func (c *Cluster) attach(role string, addrs ...string) error {
	if err := c.addNS(role); err != nil {
		return err
	}
	ns, peer := c.NS(role), "p-"+role
	if err := ip("-n", c.NS("net"), "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
		return err
	}
	cmds := [][]string{{"-n", c.NS("net"), "link", "set", peer, "master", "br0", "up"}}
	for _, a := range addrs {
		add := []string{"-n", ns, "addr", "add", a, "dev", "eth0"}
		if strings.Contains(a, ":") {
			// An IPv6 address is usable at once, not after ~1-2 s of
			// duplicate address detection on a network we own.
			add = append(add, "nodad")
		}
		cmds = append(cmds, add)
	}
	cmds = append(cmds, []string{"-n", ns, "link", "set", "eth0", "up"})
	for _, args := range cmds {
		if err := ip(args...); err != nil {
			return err
		}
	}
	return nil
}

// plumbPod creates a pod namespace behind node n: a routed veth, /32 and
// /128 on the pod side, routes to its node only (the node has no default
// route): IPv4 by default, IPv6 for the ULA range fd00::/8 only.
func (c *Cluster) plumbPod(n *Node, role, addr, addr6 string) error {
	if err := c.addNS(role); err != nil {
		return err
	}
	c.podSeq++
	hostIf, gw, gw6, ns := fmt.Sprintf("vp%d", c.podSeq), n.PodNet+".1", n.PodNet6+"1", c.NS(role)
	for _, args := range [][]string{
		{"-n", n.NS, "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", n.NS, "addr", "add", gw + "/32", "dev", hostIf},
		{"-n", n.NS, "addr", "add", gw6 + "/128", "dev", hostIf, "nodad"},
		{"-n", n.NS, "link", "set", hostIf, "up"},
		{"-n", n.NS, "route", "add", addr + "/32", "dev", hostIf, "src", gw},
		{"-n", n.NS, "route", "add", addr6 + "/128", "dev", hostIf, "src", gw6},
		{"-n", ns, "addr", "add", addr + "/32", "dev", "eth0"},
		{"-n", ns, "addr", "add", addr6 + "/128", "dev", "eth0", "nodad"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", gw + "/32", "dev", "eth0", "scope", "link"},
		{"-n", ns, "route", "add", "default", "via", gw, "dev", "eth0"},
		{"-n", ns, "route", "add", gw6 + "/128", "dev", "eth0"},
		{"-n", ns, "route", "add", "fd00::/8", "via", gw6, "dev", "eth0"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	return nil
}

// AddPod creates pod `name` on node n at the next free n.PodNet address and
// starts podserver in it (TCP/HTTP and UDP on :8080), waiting until it
// listens. Addresses are never reused, so no stale conntrack entry of an
// earlier pod can make a test pass or fail.
func (c *Cluster) AddPod(n *Node, name string) *Pod {
	c.T.Helper()
	if n.lastPod < 10 {
		n.lastPod = 10
	}
	n.lastPod++
	if n.lastPod >= 100 {
		c.T.Fatalf("node %s: out of pod addresses", n.Name)
	}
	p := &Pod{Name: name, NS: c.NS(name), IP: fmt.Sprintf("%s.%d", n.PodNet, n.lastPod),
		IP6: fmt.Sprintf("%s%d", n.PodNet6, n.lastPod), Node: n}
	c.must(c.plumbPod(n, name, p.IP, p.IP6), "pod "+name)
	p.hostIf = fmt.Sprintf("vp%d", c.podSeq)
	proc, err := startProc(name, p.NS, c.logPath(name), c.Bins.PodServer, "-name", name, "-listen", ":8080")
	c.must(err, "podserver "+name)
	p.Proc = proc
	c.pods[name] = p
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range []string{p.IP, p.IP6} {
		c.waitListening(p, addr, deadline)
	}
	return p
}

// waitListening waits until pod p accepts TCP on addr:8080, from its node.
func (c *Cluster) waitListening(p *Pod, addr string, deadline time.Time) {
	c.T.Helper()
	for {
		ctx, cancel := c.Ctx(time.Second)
		conn, err := DialIn(ctx, p.Node.NS, "tcp", net.JoinHostPort(addr, "8080"))
		cancel()
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("pod %s does not listen on %s:8080: %v\n%s", p.Name, addr, err, p.Proc.Tail(2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RemovePod stops the pod's server and deletes its namespace and route.
func (c *Cluster) RemovePod(p *Pod) {
	c.T.Helper()
	p.Proc.Stop(2 * time.Second)
	c.must(deleteNS(p.NS), "deleting pod "+p.Name)
	delete(c.pods, p.Name)
}
