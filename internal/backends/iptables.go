package backends

import (
	"context"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/knfacct"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// iptablesBackend is iptables mode's row.
var iptablesBackend = Backend{
	Mode:     proxy.ModeIPTables,
	Families: hostFamilies,
	Open:     openIPTables,
	Decide: func(cfg *config.Config, o *desired.Options) {
		if cfg.LocalhostNodePorts {
			o.Localhost = desired.LocalhostModeDNAT
		}
	},
	RemoveLeftovers: anyConfig(iptables.CleanupLeftovers),
	// iptables and IPVS modes leave each other's rules alone, as upstream
	// (KEP-2448).
	KeepsLeftoversOf: []proxy.Mode{proxy.ModeIPVS},
	Objects:          iptablesObjects,
	SyncFailures:     proxymetrics.IPTablesRestoreFailuresTotal,
}

// openIPTables detects the iptables flavour once for both families and
// opens, unless only Init runs, the nfacct client the rules count into
// and the metrics read.
func openIPTables(ctx context.Context, env Env) (*Instance, error) {
	flavour := kiptables.DetectFlavour(ctx)
	var acct knfacct.Interface
	var closeAcct func()
	if !env.InitOnly {
		acct, closeAcct = openNFAcct(ctx)
	}
	opts := iptables.Options{
		ConntrackTCPBeLiberal: tcpBeLiberal(),
		SyncPeriod:            env.Config.SyncPeriod,
		NFAcct:                acct,
		Flavour:               flavour,
	}
	inst, err := PerFamily(env,
		func(f proxy.IPFamily) (*iptables.Proxier, error) { return iptables.New(ctx, f, opts) },
		func(p *iptables.Proxier) syncer.Backend { return syncer.Backend{Proxier: p, PortHolder: p} },
		nil)
	if err != nil {
		if closeAcct != nil {
			closeAcct()
		}
		return nil, err
	}
	inst.IPTablesFlavour = flavour
	if acct != nil {
		inst.OnClose(closeAcct)
		inst.Metrics = append(inst.Metrics, metrics.WithNFAcct(acct))
	}
	return inst, nil
}

// openNFAcct opens the nfacct client. On a kernel without nfnetlink_acct
// it logs, as upstream does, and returns nil: the rules then have no
// nfacct match and the two kubeproxy_iptables_*_packets_total metrics no
// sample.
func openNFAcct(ctx context.Context) (knfacct.Interface, func()) {
	c, err := knfacct.New()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to create nfacct runner, nfacct based metrics won't be available")
		return nil, nil
	}
	return c, c.Close
}

// tcpBeLiberal reads nf_conntrack_tcp_be_liberal: when set, the kernel
// accepts out-of-window TCP packets and no INVALID-drop rule is needed.
func tcpBeLiberal() bool {
	b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal")
	return err == nil && strings.TrimSpace(string(b)) != "0"
}

// hostFamilies lists, like upstream, one family per family the host
// supports, whether or not the cluster is dual-stack.
func hostFamilies() []proxy.IPFamily {
	if _, err := os.Stat("/proc/net/if_inet6"); err != nil {
		return []proxy.IPFamily{proxy.IPv4}
	}
	return proxy.Families
}
