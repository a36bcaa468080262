// Package app is svcproxy's command line: kube-proxy's flags and config
// precedence, and the dispatch to the run, cleanup and init-only paths.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/cobra"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/config"
)

// modeFunc is the signature of run, cleanup and initOnly.
type modeFunc func(context.Context, *config.Config) error

// actions are the three things the command can end up doing once the
// configuration is resolved; tests replace them.
type actions struct {
	run, cleanup, initOnly modeFunc
	applyGlobals           func(*config.Config) error
}

// NewCommand returns the svcproxy command.
func NewCommand() *cobra.Command {
	return newCommand(actions{run: run, cleanup: cleanup, initOnly: initOnly, applyGlobals: applyGlobals})
}

func newCommand(act actions) *cobra.Command {
	o := newOptions()
	cmd := &cobra.Command{
		Use:   "svcproxy",
		Short: "A drop-in replacement for kube-proxy",
		Long: `svcproxy runs on each node and programs the kernel (nftables, iptables or
IPVS) so that traffic to Service IPs and ports reaches the Service's endpoints.
It accepts kube-proxy's flags and KubeProxyConfiguration file.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.version != "false" {
				return printVersion(cmd.OutOrStdout(), o.version)
			}
			logger := klog.FromContext(cmd.Context())
			cfg, err := o.complete(logger, cmd.Flags())
			if err != nil {
				return err
			}
			if err := act.applyGlobals(cfg); err != nil {
				return err
			}
			return o.dispatch(cmd.Context(), logger, cfg, act)
		},
	}
	o.addFlags(cmd.Flags())
	addSubcommands(cmd)
	return cmd
}

// dispatch runs the one action the flags ask for.
func (o *options) dispatch(ctx context.Context, logger klog.Logger, cfg *config.Config, act actions) error {
	switch {
	case o.writeConfigTo != "":
		return writeConfig(logger, o.writeConfigTo, cfg)
	case o.cleanupAndExit:
		return act.cleanup(ctx, cfg)
	case o.initAndExit:
		return act.initOnly(ctx, cfg)
	default:
		return runWatchingConfig(ctx, cfg, act.run)
	}
}

// runWatchingConfig runs the proxy and, with a config file, stops it with
// an error when the file changes, so that the pod restarts (upstream has no
// hot reload either).
func runWatchingConfig(ctx context.Context, cfg *config.Config, run modeFunc) error {
	if cfg.ConfigFile == "" {
		return run(ctx, cfg)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	changes := config.Watch(ctx, cfg.ConfigFile)
	go func() {
		if err, ok := <-changes; ok && err != nil {
			cancel(err)
		}
	}()
	err := run(ctx, cfg)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

func writeConfig(logger klog.Logger, path string, cfg *config.Config) error {
	data, err := config.EncodeYAML(cfg.Versioned)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing configuration: %w", err)
	}
	logger.Info("Wrote configuration", "file", path)
	return nil
}

// applyGlobals applies the process-wide settings of the resolved config:
// klog from the logging section, --feature-gates to client-go's gates as
// well (clientgates.go), and the runtime's heap sampling.
func applyGlobals(cfg *config.Config) error {
	sampleHeap(cfg.EnableProfiling)
	gate, err := config.NewFeatureGate(cfg.FeatureGates)
	if err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(&cfg.Versioned.Logging, gate); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	useGatesForClientGo(gate, config.KnownFeature)
	return nil
}

// sampleHeap keeps the runtime's heap profiling on only when
// enableProfiling serves /debug/pprof/heap, its one reader. Each sample (one
// per 512 KiB allocated) records its call stack in a table the process
// never frees (allocated at the first sample, resident more and more as a
// long run samples new call paths: `make footprint` shows it).
func sampleHeap(enableProfiling bool) {
	if !enableProfiling {
		runtime.MemProfileRate = 0
	}
}
