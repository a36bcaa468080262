package app

import (
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/component-base/featuregate"
)

// clientGoGates makes client-go read its own feature gates (WatchListClient,
// InformerResourceVersion, ClientsAllowCBOR, …) from --feature-gates, as
// upstream's kube-proxy binary does: its pkg/features registers client-go's
// gates in the Kubernetes registry and hands that registry to client-go, so
// `--feature-gates=WatchListClient=false` turns streaming lists off there,
// and client-go's KUBE_FEATURE_* environment variables no longer apply.
// A gate client-go asks for that the registry does not know (a newer
// client-go than upstreamBinaryVersion) keeps client-go's own answer.
type clientGoGates struct {
	gate     featuregate.FeatureGate
	known    func(featuregate.Feature) bool
	fallback clientfeatures.Gates
}

func (g clientGoGates) Enabled(f clientfeatures.Feature) bool {
	if name := featuregate.Feature(f); g.known(name) {
		return g.gate.Enabled(name)
	}
	return g.fallback.Enabled(f)
}

// useGatesForClientGo hands gate to client-go (process-wide, once, before
// any client is built).
func useGatesForClientGo(gate featuregate.FeatureGate, known func(featuregate.Feature) bool) {
	clientfeatures.ReplaceFeatureGates(clientGoGates{gate: gate, known: known, fallback: clientfeatures.FeatureGates()})
}
