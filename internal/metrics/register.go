package metrics

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Option adjusts Register.
type Option func(*registerOptions)

type registerOptions struct {
	nfacct proxymetrics.NFAcctReader
	// localhost reads the localhost node-port reject counters;
	// localhostOn registers those families (nftables mode).
	localhost   LocalhostRejects
	localhostOn bool
	// noRuntime leaves out go_*, process_* and kubernetes_build_info.
	noRuntime bool
	// extra are the families of a mode that families does not list.
	extra []prometheus.Collector
}

// WithFamilies registers cs beside the families the mode exposes: the
// families of a backend that upstream does not have.
func WithFamilies(cs ...prometheus.Collector) Option {
	return func(o *registerOptions) { o.extra = append(o.extra, cs...) }
}

// WithoutRuntimeCollectors leaves the Go, process and build-info
// collectors out: the process serves component-base's legacy registry
// beside this one, which has them (with upstream's Go collector settings).
func WithoutRuntimeCollectors() Option {
	return func(o *registerOptions) { o.noRuntime = true }
}

// WithNFAcct gives the iptables-mode nfacct collectors their counter reader.
// Without it they are registered but report nothing.
func WithNFAcct(r proxymetrics.NFAcctReader) Option {
	return func(o *registerOptions) { o.nfacct = r }
}

// Register adds to reg the kubeproxy_* families that mode exposes, the Go
// and process collectors and kubernetes_build_info. A registry takes one
// Register call. client-go's rest_client_* families live in the restclient
// subpackage, which keeps client-go out of this package's dependencies.
func Register(reg prometheus.Registerer, mode proxy.Mode, opts ...Option) error {
	var o registerOptions
	for _, opt := range opts {
		opt(&o)
	}
	var cs []prometheus.Collector
	if !o.noRuntime {
		cs = append(cs, collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newBuildInfo())
	}
	for _, f := range families {
		if f.in(mode) {
			cs = append(cs, f.collector)
		}
	}
	cs = append(cs, o.extra...)
	if mode == proxy.ModeIPTables {
		cs = append(cs, proxymetrics.NFAcctCollectors(o.nfacct)...)
	}
	if mode == proxy.ModeNFTables && o.localhostOn {
		cs = append(cs, newLocalhostCollectors(o.localhost)...)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// newBuildInfo returns kubernetes_build_info, which component-base exposes
// on every Kubernetes binary and monitoring stacks keep. Values describe
// this binary.
func newBuildInfo() prometheus.Collector {
	info := buildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kubernetes_build_info",
		Help: alpha("A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, " +
			"build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running."),
		ConstLabels: info,
	})
	g.Set(1)
	return g
}

func buildInfo() prometheus.Labels {
	l := prometheus.Labels{
		"major": "", "minor": "", "git_version": "v0.0.0-dev", "git_commit": "",
		"git_tree_state": "", "build_date": "", "go_version": runtime.Version(),
		"compiler": runtime.Compiler, "platform": runtime.GOOS + "/" + runtime.GOARCH,
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return l
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		l["git_version"] = v
		parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
		if len(parts) >= 2 {
			l["major"], l["minor"] = parts[0], parts[1]
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			l["git_commit"] = s.Value
		case "vcs.time":
			l["build_date"] = s.Value
		case "vcs.modified":
			l["git_tree_state"] = map[string]string{"true": "dirty", "false": "clean"}[s.Value]
		}
	}
	return l
}
