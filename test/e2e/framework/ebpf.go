package framework

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ebpfNode is what a node in ebpf mode owns: a cgroup v2 child of its own
// (the only cgroup its svcproxy attaches to; its pods' clients run in it)
// and a bpffs of its own for the pins. Nothing is attached to the
// machine's cgroup root, and every node's pins are apart.
type ebpfNode struct {
	cgroup, pins string
}

// UsesNFTables reports whether mode's Service rules are nftables': ebpf
// mode's packet path is nftables mode's table.
func UsesNFTables(mode string) bool { return mode == "nftables" || mode == "ebpf" }

// ebpfArgs are node n's ebpf flags, creating what they name the first
// time; none unless n runs, or ran, in ebpf mode. A node that switched
// to another mode keeps --bpf-pin-dir, from which that mode's start
// removes ebpf mode's pins.
func (c *Cluster) ebpfArgs(n *Node) ([]string, error) {
	if c.mode(n) != "ebpf" {
		if n.ebpf == nil {
			return nil, nil
		}
		return []string{"--bpf-pin-dir", n.ebpf.pins}, nil
	}
	if n.ebpf == nil {
		e, err := c.newEBPFNode(n)
		if err != nil {
			return nil, err
		}
		n.ebpf = e
	}
	args := []string{"--bpf-cgroup-root", n.ebpf.cgroup, "--bpf-pin-dir", n.ebpf.pins}
	// The node's interfaces live in its own namespace: the tc programs
	// never see the machine's. An earlier svcproxy (n.Bin) lacks the flag,
	// unless it is one with the tc programs (n.BinTC); n.NoTC leaves it out.
	if tc := c.tcInterfaces(); tc != "" && !n.NoTC && (n.Bin == "" || n.BinTC) {
		args = append(args, "--bpf-tc-interfaces", tc)
		if a := c.acceleration(); a != "" {
			args = append(args, "--bpf-acceleration", a)
		}
	}
	return args, nil
}

// acceleration is --bpf-acceleration for nodes that run the tc programs:
// the cluster's option, else E2E_EBPF_ACCEL (to run every scenario so).
func (c *Cluster) acceleration() string {
	if c.Opts.Acceleration != "" {
		return c.Opts.Acceleration
	}
	return os.Getenv("E2E_EBPF_ACCEL")
}

// tcInterfaces is --bpf-tc-interfaces for nodes in ebpf mode: the
// cluster's option, else E2E_EBPF_TC (to run every scenario so).
func (c *Cluster) tcInterfaces() string {
	if len(c.Opts.TCInterfaces) > 0 {
		return strings.Join(c.Opts.TCInterfaces, ",")
	}
	return os.Getenv("E2E_EBPF_TC")
}

// TCServes reports whether node n's svcproxy runs ebpf mode with the tc
// programs, which then serve both families without nftables rules: node n
// is in ebpf mode, runs this tree's svcproxy and has --bpf-tc-interfaces.
func (c *Cluster) TCServes(n *Node) bool {
	return c.mode(n) == "ebpf" && n.Bin == "" && c.tcInterfaces() != ""
}

// proxyChains matches the chains svcproxy's iptables and IPVS modes
// create in iptables-save's output (a kubelet's KUBE-FIREWALL and
// KUBE-KUBELET-CANARY are not svcproxy's).
var proxyChains = regexp.MustCompile(`(?m)^:KUBE-(SERVICES|NODEPORTS|POSTROUTING|MARK-MASQ|PROXY-CANARY|PROXY-FIREWALL|EXTERNAL-SERVICES|FORWARD|LOAD-BALANCER|NODE-PORT|SVC-|SEP-|EXT-|FW-|SVL-)`)

// ruleFamilies are each family's nftables table of svcproxy's and the
// iptables dump of that family.
var ruleFamilies = []struct{ nft, save string }{{"ip", "iptables-save"}, {"ip6", "ip6tables-save"}}

// RulesLeft returns what rules of svcproxy's node n holds in either family
// ("" when none): the chains of proxyChains in iptables-save and
// ip6tables-save, and in the nftables tables "ip kube-proxy" and "ip6
// kube-proxy" whatever a start with the tc programs does not keep of them,
// which is at most the kept chains and their one rule (KeptTable; they go
// with the last connection earlier rules translated, leaving the table
// empty). A node without a family's table lacked what keeps those
// connections, and that is reported too.
func (c *Cluster) RulesLeft(n *Node) (string, error) {
	tables, err := c.Exec(n, "nft", "list", "tables")
	if err != nil {
		return "", fmt.Errorf("nft list tables: %w", err)
	}
	var left []string
	for _, f := range ruleFamilies {
		table := f.nft + " kube-proxy"
		if !strings.Contains(tables, "table "+table) {
			left = append(left, fmt.Sprintf("no nftables table %s (what keeps conntrack and the nat hooks is missing)", table))
		} else {
			listed, err := c.Exec(n, "nft", "--json", "list", "table", f.nft, "kube-proxy")
			if err != nil {
				return "", fmt.Errorf("nft list table %s: %w", table, err)
			}
			extra, err := KeptTable(listed)
			if err != nil {
				return "", err
			}
			if len(extra) > 0 {
				left = append(left, fmt.Sprintf("beyond what keeps conntrack and the nat hooks, in the nftables table %s: %s", table, strings.Join(extra, ", ")))
			}
		}
		saved, err := c.Exec(n, f.save)
		if err != nil {
			return "", fmt.Errorf("%s: %w", f.save, err)
		}
		for _, chain := range proxyChains.FindAllString(saved, -1) {
			left = append(left, f.save+" "+chain)
		}
	}
	return strings.Join(left, ", "), nil
}

// keptChains are the chains a start with the tc programs keeps of each
// family's table (or creates): the nftables rules' nat base chains, empty,
// and a chain nothing jumps to whose one rule keeps connection tracking
// on, so that the connections earlier rules translated keep their
// translation.
var keptChains = []string{"keep-conntrack", "nat-output", "nat-postrouting", "nat-prerouting"}

// KeptTable lists, from nft's JSON listing of a family's table, every
// object beyond the kept chains and the one rule of keep-conntrack.
func KeptTable(listing string) ([]string, error) {
	var parsed struct {
		Nftables []map[string]struct {
			Name  string `json:"name"`
			Chain string `json:"chain"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(listing), &parsed); err != nil {
		return nil, fmt.Errorf("nft's JSON listing: %w", err)
	}
	var extra []string
	keepRules := 0
	for _, obj := range parsed.Nftables {
		for kind, o := range obj {
			switch {
			case kind == "metainfo" || kind == "table":
			case kind == "chain" && slices.Contains(keptChains, o.Name):
			case kind == "rule" && o.Chain == "keep-conntrack" && keepRules == 0:
				keepRules++
			case kind == "rule":
				extra = append(extra, "a rule in "+o.Chain)
			default:
				extra = append(extra, kind+" "+o.Name)
			}
		}
	}
	return extra, nil
}

// TCAttached reports whether node n's svcproxy pinned its tc programs'
// links on iface: the flag took effect.
func (c *Cluster) TCAttached(n *Node, iface string) bool {
	if n.ebpf == nil {
		return false
	}
	_, err := os.Stat(filepath.Join(n.ebpf.pins, "tc", "link_np_ingress_"+iface))
	return err == nil
}

func (c *Cluster) newEBPFNode(n *Node) (*ebpfNode, error) {
	if c.cgroupMount == "" {
		dir := filepath.Join(c.Work, "cgroup2")
		if err := mountAt(dir, "cgroup2"); err != nil {
			return nil, err
		}
		c.cgroupMount = dir
	}
	// Every cgroup2 mount shows the machine's one hierarchy: the name
	// carries the run's prefix.
	e := &ebpfNode{cgroup: filepath.Join(c.cgroupMount, c.Prefix+n.Name), pins: filepath.Join(c.Work, "bpf-"+n.Name)}
	if err := os.Mkdir(e.cgroup, 0o755); err != nil {
		return nil, err
	}
	if err := mountAt(e.pins, "bpf"); err != nil {
		_ = os.Remove(e.cgroup)
		return nil, err
	}
	return e, nil
}

func mountAt(dir, fstype string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("none", dir, fstype, 0, ""); err != nil {
		return fmt.Errorf("mount -t %s %s: %w", fstype, dir, err)
	}
	return nil
}

// EBPFPinDir is node n's --bpf-pin-dir in ebpf mode ("" in another mode):
// the bench reads the maps the hooks translate with from there.
func (c *Cluster) EBPFPinDir(n *Node) string {
	if n.ebpf == nil {
		return ""
	}
	return n.ebpf.pins
}

// EBPFPinsLeft returns what ebpf mode left pinned for node n ("" when
// nothing): its families' pin directories.
func (c *Cluster) EBPFPinsLeft(n *Node) string {
	if n.ebpf == nil {
		return ""
	}
	var left []string
	for _, f := range []string{"ipv4", "ipv6"} {
		if _, err := os.Stat(filepath.Join(n.ebpf.pins, f)); err == nil {
			left = append(left, filepath.Join(n.ebpf.pins, f))
		}
	}
	return strings.Join(left, " ")
}

// InCgroup wraps argv, run in namespace role from, so that a process of
// a pod (or of a node's client pod, cliN) of a node in ebpf mode starts
// in that node's cgroup, as a kubelet would put it.
func (c *Cluster) InCgroup(from string, argv []string) []string {
	n := c.podNode(from)
	if n == nil || n.ebpf == nil {
		return argv
	}
	script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec "$@"`, n.ebpf.cgroup)
	return append([]string{"sh", "-c", script, "sh"}, argv...)
}

// podNode is the node whose pod role is, nil for the other roles.
func (c *Cluster) podNode(role string) *Node {
	if p := c.pods[role]; p != nil {
		return p.Node
	}
	for _, n := range c.Nodes {
		if role == fmt.Sprintf("cli%d", n.Index) {
			return n
		}
	}
	return nil
}

// teardownEBPF removes, once every process is gone, the nodes' cgroups
// and bpffs mounts (the pins, and with them the programs, go with the
// mount) and the cgroup2 mount.
func (c *Cluster) teardownEBPF() {
	for _, n := range c.Nodes {
		if n.ebpf == nil {
			continue
		}
		if err := unix.Unmount(n.ebpf.pins, 0); err != nil {
			c.T.Errorf("teardown: unmounting %s: %v", n.ebpf.pins, err)
		}
		// The cgroup's last processes may still be exiting.
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if err = os.Remove(n.ebpf.cgroup); err == nil {
				break
			}
		}
		if err != nil {
			c.T.Errorf("teardown: removing cgroup %s: %v", n.ebpf.cgroup, err)
		}
	}
	if c.cgroupMount != "" {
		if err := unix.Unmount(c.cgroupMount, 0); err != nil {
			c.T.Errorf("teardown: unmounting %s: %v", c.cgroupMount, err)
		}
	}
}
