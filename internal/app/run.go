package app

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/leftovers"
)

// run starts the proxy and blocks until ctx is done or it fails.
func run(ctx context.Context, cfg *config.Config) error {
	d, err := newDaemon(ctx, cfg, backends.Table)
	if err != nil {
		return err
	}
	return d.run(ctx)
}

// cleanup removes the rules of every mode and returns (--cleanup); any
// error makes the process exit non-zero, as upstream. This node's DSR
// advertisement goes first, when the API server can be reached: the tc
// programs stop decapsulating when they drain. Upstream's --cleanup needs
// no API server, and neither does the rest of this one.
func cleanup(ctx context.Context, cfg *config.Config) error {
	client, err := cleanupClient(cfg)
	if err != nil {
		klog.FromContext(ctx).Info("Not withdrawing a DSR advertisement: no API client", "err", err)
	}
	return cleanupWith(ctx, cfg, backends.Table, client)
}

// cleanupWith is cleanup over reg, withdrawing this node's DSR Lease
// through client first (none when client is nil).
func cleanupWith(ctx context.Context, cfg *config.Config, reg backends.Registry, client kubernetes.Interface) error {
	if client != nil && cfg.BPFDSRNamespace != "" {
		if name, err := nodeName(cfg.HostnameOverride); err == nil {
			l := &dsrLease{client: client, namespace: cfg.BPFDSRNamespace, node: name, logger: klog.FromContext(ctx)}
			l.withdraw(ctx)
		}
	}
	if err := leftovers.All(ctx, reg, cfg); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

// cleanupClient is the API client of --cleanup.
func cleanupClient(cfg *config.Config) (kubernetes.Interface, error) {
	rc, err := RESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	client, _, err := newClients(rc)
	return client, err
}

// initOnly performs the privileged initialisation and returns (--init-only).
func initOnly(ctx context.Context, cfg *config.Config) error {
	b, err := backends.Table.Lookup(cfg.Mode)
	if err != nil {
		return err
	}
	if err := setupNode(ctx, cfg, b); err != nil {
		return err
	}
	inst, err := openBackend(ctx, b, cfg, b.Families(), true)
	if err != nil {
		return err
	}
	inst.Close()
	return nil
}
