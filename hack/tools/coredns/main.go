// Command coredns is a minimal CoreDNS for the test cluster of hack/cluster.sh:
// only the plugins that serve cluster.local from the API (no forward plugin,
// since the cluster's namespaces have no route to any upstream resolver).
// Built from the Go module proxy, pinned by this module's go.sum.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The plugin order of a Corefile block is this list's order, not the file's
// (upstream generates it from plugin.cfg; this build has only these).
func init() {
	dnsserver.Directives = []string{"reload", "ready", "health", "errors", "log", "cache", "loadbalance", "kubernetes"}
}

func main() { coremain.Run() }
