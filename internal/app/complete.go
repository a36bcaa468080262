package app

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// complete resolves the configuration with upstream's precedence (contract
// §1.1): a --config file replaces every config flag except
// --hostname-override and the logging flags; without a file the flags are
// the configuration.
func (o *options) complete(logger klog.Logger, fs *pflag.FlagSet) (*config.Config, error) {
	var obj *v1alpha1.KubeProxyConfiguration
	if o.configFile != "" {
		loaded, err := config.Load(logger, o.configFile)
		if err != nil {
			return nil, err
		}
		config.SetDefaults(loaded)
		if err := copyLogsFromFlags(fs, &loaded.Logging); err != nil {
			return nil, err
		}
		obj = loaded
	} else {
		obj = o.fromFlags()
	}
	if err := o.applyHostnameOverride(obj); err != nil {
		return nil, err
	}
	cfg, err := config.Complete(obj)
	if err != nil {
		return nil, err
	}
	cfg.Master = o.master
	cfg.ConfigFile = o.configFile
	cfg.ServiceProxyName = o.serviceProxyName
	cfg.StateSocket = o.stateSocket
	cfg.WatchNodeAddresses = o.watchNodeAddrs
	cfg.BPFCgroupRoot = o.bpfCgroupRoot
	cfg.BPFPinDir = o.bpfPinDir
	cfg.BPFTCInterfaces = o.bpfTCInterfaces
	cfg.BPFAcceleration = o.bpfAcceleration
	cfg.BPFSocketEntries = o.bpfSocketEntries
	if cfg.ExternalBalancing, err = proxy.ParseBalancing(o.externalLBAlgorithm); err != nil {
		return nil, fmt.Errorf("--external-lb-algorithm: %w", err)
	}
	if cfg.ExternalForwarding, err = proxy.ParseForwarding(o.externalForwarding); err != nil {
		return nil, fmt.Errorf("--external-forwarding: %w", err)
	}
	cfg.BPFDSR = o.bpfDSR
	cfg.BPFDSRNamespace = o.bpfDSRNamespace
	if err := config.ValidateDSR(cfg); err != nil {
		return nil, err
	}
	cfg.Flags = map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		// The removed flags only refuse themselves: /flagz lists kube-proxy's
		// flags, which have none of them.
		if _, removed := f.Value.(removedFlag); !removed {
			cfg.Flags[f.Name] = f.Value.String()
		}
	})
	return cfg, nil
}

// fromFlags finishes the flag-built object: the shared period and
// masquerade flags go to the sections §2.2 says, and the deprecated port
// flags adjust the bind addresses.
func (o *options) fromFlags() *v1alpha1.KubeProxyConfiguration {
	obj := o.flagConfig.DeepCopy()
	obj.IPTables.MasqueradeAll = o.masqueradeAll
	obj.NFTables.MasqueradeAll = o.masqueradeAll
	if proxy.Mode(obj.Mode) == proxy.ModeIPVS {
		obj.IPVS.SyncPeriod.Duration = o.ipvsSyncPeriod
		obj.IPVS.MinSyncPeriod.Duration = o.ipvsMinSyncPeriod
	} else {
		obj.IPTables.SyncPeriod.Duration = o.iptablesSyncPeriod
		obj.IPTables.MinSyncPeriod.Duration = o.iptablesMinSyncPeriod
		obj.NFTables.SyncPeriod.Duration = o.iptablesSyncPeriod
		obj.NFTables.MinSyncPeriod.Duration = o.iptablesMinSyncPeriod
	}
	// Upstream applies the deprecated port flags (default 10256 and 10249)
	// unless a file or --write-config-to is given: they give a bare IP its
	// port, and 0 disables the server.
	if o.writeConfigTo == "" {
		obj.HealthzBindAddress = addressFromDeprecatedFlag(obj.HealthzBindAddress, o.healthzPort)
		obj.MetricsBindAddress = addressFromDeprecatedFlag(obj.MetricsBindAddress, o.metricsPort)
	}
	return obj
}

// addressFromDeprecatedFlag applies a --*-port value: 0 disables the
// server; otherwise the port is appended to a bare IP, and an address that
// already has a port keeps it.
func addressFromDeprecatedFlag(addr string, port int32) string {
	if port == 0 {
		return ""
	}
	return config.AppendPortIfNeeded(addr, int(port))
}

// applyHostnameOverride applies --hostname-override over either source,
// trimmed and lowercased as upstream does.
func (o *options) applyHostnameOverride(obj *v1alpha1.KubeProxyConfiguration) error {
	if o.hostnameOverride == "" {
		return nil
	}
	name := strings.TrimSpace(o.hostnameOverride)
	if name == "" {
		return errors.New("--hostname-override: empty hostname-override is invalid")
	}
	obj.HostnameOverride = strings.ToLower(name)
	return nil
}

// copyLogsFromFlags copies the logging flags the user set over the file's
// logging section, so "--config f -v=5" works; --vmodule entries are
// appended to the file's.
func copyLogsFromFlags(from *pflag.FlagSet, to *logsapi.LoggingConfiguration) error {
	var clone pflag.FlagSet
	logsapi.AddFlags(to, &clone)
	fileVModule := to.VModule
	to.VModule = nil
	var err error
	clone.VisitAll(func(f *pflag.Flag) {
		set := from.Lookup(f.Name)
		if err != nil || set == nil || !set.Changed {
			return
		}
		if setErr := f.Value.Set(set.Value.String()); setErr != nil {
			err = fmt.Errorf("copying --%s over the config file's logging: %w", f.Name, setErr)
		}
	})
	to.VModule = append(to.VModule, fileVModule...)
	return err
}
