package app

import (
	"time"

	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/localapi"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// options holds everything the command line sets. Flags that map one to one
// onto a v1alpha1 field write straight into flagConfig, which starts out
// fully defaulted; the few that feed several fields, or none, have their
// own variables here.
type options struct {
	flagConfig *v1alpha1.KubeProxyConfiguration

	configFile       string
	writeConfigTo    string
	cleanupAndExit   bool
	initAndExit      bool
	master           string
	hostnameOverride string
	serviceProxyName string
	stateSocket      string
	watchNodeAddrs   bool
	bpfCgroupRoot    string
	bpfPinDir        string
	bpfTCInterfaces  []string
	bpfAcceleration  string
	bpfSocketEntries uint32
	bpfDSR           bool
	bpfDSRNamespace  string
	version          string
	// externalLBAlgorithm is --external-lb-algorithm, parsed by complete.
	externalLBAlgorithm string
	// externalForwarding is --external-forwarding, parsed by complete.
	externalForwarding string

	// Shared by the iptables and nftables sections (contract §2.2).
	iptablesSyncPeriod    time.Duration
	iptablesMinSyncPeriod time.Duration
	masqueradeAll         bool
	// Only used in ipvs mode.
	ipvsSyncPeriod    time.Duration
	ipvsMinSyncPeriod time.Duration

	// Deprecated; replace the port of the bind addresses when set.
	healthzPort int32
	metricsPort int32
}

func newOptions() *options {
	obj := config.NewDefaulted()
	return &options{
		flagConfig:            obj,
		iptablesSyncPeriod:    obj.IPTables.SyncPeriod.Duration,
		iptablesMinSyncPeriod: obj.IPTables.MinSyncPeriod.Duration,
		// Upstream's flags share one pair of periods, defaulted from the
		// iptables section: --ipvs-min-sync-period defaults to 1s, not to
		// the file default of ipvs.minSyncPeriod (0s).
		ipvsSyncPeriod:      obj.IPTables.SyncPeriod.Duration,
		ipvsMinSyncPeriod:   obj.IPTables.MinSyncPeriod.Duration,
		stateSocket:         localapi.DefaultPath,
		externalLBAlgorithm: proxy.BalanceRandom.String(),
		externalForwarding:  proxy.ForwardSNAT.String(),
		bpfDSRNamespace:     config.DefaultDSRNamespace,
		healthzPort:         config.HealthzPort,
		metricsPort:         config.MetricsPort,
	}
}
