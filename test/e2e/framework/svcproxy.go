package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeConfig writes node n's KubeProxyConfiguration: mode per cluster,
// health on the node's own address, metrics on every address of the node
// (its own for /metrics from outside), a short syncPeriod so that repairs
// of rules a third party deleted are quick to observe.
func (c *Cluster) writeConfig(n *Node) error {
	sp := c.Opts.SyncPeriod.String()
	if c.Opts.MinSyncPeriod != "" {
		// Both sections: only the one of the mode is read.
		sp += "\n  minSyncPeriod: " + c.Opts.MinSyncPeriod
	}
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: %s
hostnameOverride: %s
clientConnection:
  kubeconfig: %s
clusterCIDR: %s
healthzBindAddress: %s:10256
metricsBindAddress: 0.0.0.0:10249
iptables:
  syncPeriod: %s
nftables:
  syncPeriod: %s
conntrack:
  # 0 = leave the kernel's conntrack settings alone (some are machine-wide).
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, c.mode(n), n.Name, n.Kubecfg, ClusterCIDR, n.IP, sp, sp) + c.Opts.ExtraConfig
	n.Config = filepath.Join(c.Work, n.Name+".yaml")
	return os.WriteFile(n.Config, []byte(cfg), 0o644)
}

// mode is the proxy mode of node n: the cluster's, unless SwitchMode
// changed it.
func (c *Cluster) mode(n *Node) string {
	if n.Mode != "" {
		return n.Mode
	}
	return c.Opts.Mode
}

// SwitchMode makes node n's next StartProxy run in mode, with the same
// configuration otherwise (what an operator's edit of the ConfigMap and a
// rollout of the DaemonSet do).
func (c *Cluster) SwitchMode(n *Node, mode string) error {
	n.Mode = mode
	return c.writeConfig(n)
}

// StartProxy starts svcproxy on node n (again, after Kill or an exit).
func (c *Cluster) StartProxy(n *Node) error {
	if n.Config == "" {
		if err := c.writeConfig(n); err != nil {
			return err
		}
	}
	if n.Proxy != nil && n.Proxy.Alive() {
		return fmt.Errorf("svcproxy on %s is still running", n.Name)
	}
	bin := c.Bins.SvcProxy
	if c.Opts.FaultInject {
		bin = FaultInjectBinary(c.T)
	}
	if n.Bin != "" {
		bin = n.Bin
	}
	args := []string{"--config", n.Config, "-v", verbosity()}
	if !c.Opts.ForeignProxy {
		if n.StateSocket == "" {
			n.StateSocket = c.stateSocket(n)
		}
		args = append(args, "--state-socket", n.StateSocket)
		args = append(args, n.ExtraArgs...)
	}
	ebpfArgs, err := c.ebpfArgs(n)
	if err != nil {
		return err
	}
	args = append(args, ebpfArgs...)
	p, err := startProc("svcproxy-"+n.Name, n.NS, c.logPath("svcproxy-"+n.Name), append([]string{bin}, args...)...)
	if err != nil {
		return err
	}
	n.Proxy = p
	return nil
}

// maxSocketPath is the longest path a unix socket can be bound at
// (sun_path, less its terminating NUL).
const maxSocketPath = 107

// stateSocket is node n's own --state-socket. Every node's svcproxy runs on
// this one machine, and a unix socket is a file, not part of the network
// namespace: sharing the default path, the nodes would replace each other's
// socket. It is in the work dir unless that is too deep for a socket path.
// The name is the daemon's default one: svcproxy binds the socket beside it
// under a temporary name no longer than that before moving it into place.
func (c *Cluster) stateSocket(n *Node) string {
	if p := filepath.Join(c.Work, "run", n.Name, "svcproxy.sock"); len(p) <= maxSocketPath {
		return p
	}
	dir := filepath.Join(os.TempDir(), c.Prefix+"run")
	c.T.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, n.Name, "svcproxy.sock")
}

// verbosity is svcproxy's -v: 2 as a deployment would run it, or
// E2E_SVCPROXY_V (4 shows every reflector retry, for watch investigations).
func verbosity() string {
	if v := os.Getenv("E2E_SVCPROXY_V"); v != "" {
		return v
	}
	return "2"
}

// HTTPGet fetches url from inside namespace ns and returns status and body.
func HTTPGet(ns, url string, timeout time.Duration) (int, string, error) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: DialerIn(ns), DisableKeepAlives: true, Proxy: nil}}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body), err
}

// Health returns the status code of /healthz or /livez on node n, asked
// from the external client (as a cloud load balancer would).
func (c *Cluster) Health(n *Node, path string) (int, string, error) {
	return HTTPGet(c.NS("ext"), fmt.Sprintf("http://%s:10256%s", n.IP, path), 2*time.Second)
}

// WaitHealthz waits until /healthz on n answers want; it fails early when
// svcproxy exited.
func (c *Cluster) WaitHealthz(n *Node, want int, limit time.Duration) error {
	return c.waitHealth(n, "/healthz", want, limit)
}

func (c *Cluster) waitHealth(n *Node, path string, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		code, body, err := c.Health(n, path)
		if err == nil && code == want {
			return nil
		}
		last = fmt.Sprintf("%d %s %v", code, strings.TrimSpace(body), err)
		if n.Proxy != nil && !n.Proxy.Alive() && want != 0 {
			return fmt.Errorf("svcproxy on %s exited; log tail:\n%s", n.Name, n.Proxy.Tail(3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s on %s: want %d, last %s after %v", path, n.Name, want, last, limit)
}

// WaitHealth is WaitHealthz for any path (/livez).
func (c *Cluster) WaitHealth(n *Node, path string, want int, limit time.Duration) error {
	return c.waitHealth(n, path, want, limit)
}

// Metrics returns node n's /metrics text.
func (c *Cluster) Metrics(n *Node) (string, error) {
	code, body, err := HTTPGet(c.NS("ext"), fmt.Sprintf("http://%s:10249/metrics", n.IP), 5*time.Second)
	if err == nil && code != 200 {
		err = fmt.Errorf("/metrics: HTTP %d", code)
	}
	return body, err
}

// Ruleset dumps node n's dataplane: the nftables ruleset or iptables-save.
func (c *Cluster) Ruleset(n *Node) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []byte
	var err error
	if UsesNFTables(c.mode(n)) {
		out, err = OutputInNS(ctx, n.NS, "nft", "list", "ruleset")
	} else {
		out, err = OutputInNS(ctx, n.NS, "iptables-save")
	}
	return string(out), err
}

// Exec runs a command in node n's namespace (a third party touching rules)
// and returns its standard output; standard error is in the error.
func (c *Cluster) Exec(n *Node, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := OutputInNS(ctx, n.NS, name, args...)
	return string(out), err
}
