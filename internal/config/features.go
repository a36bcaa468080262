package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
)

// Gates whose state svcproxy reads. Upstream kube-proxy shares the global
// Kubernetes gate registry, so --feature-gates accepts every Kubernetes gate
// and nothing else; zz_generated_features.go holds that registry as of
// upstreamBinaryVersion (hack/update-featuregates.sh), so that unknown
// names, locked gates and AllAlpha/AllBeta behave exactly as upstream's.
const (
	// KubeProxyIPVS allows mode ipvs (deprecated in 1.37; default true).
	KubeProxyIPVS featuregate.Feature = "KubeProxyIPVS"
	// KubeProxyNFTablesLocalhostNodePorts serves TCP NodePorts on loopback
	// in nftables mode.
	KubeProxyNFTablesLocalhostNodePorts featuregate.Feature = "KubeProxyNFTablesLocalhostNodePorts"
)

// UpstreamVersion is the kube-proxy release whose behaviour svcproxy
// reproduces (its emulation version, in /statusz's terms).
const UpstreamVersion = upstreamBinaryVersion

// NewFeatureGate returns upstream's gate registry, evaluated at upstream's
// binary version, with settings applied. It fails as upstream does: unknown
// names, a locked gate set to the other value, unmet dependencies.
func NewFeatureGate(settings map[string]bool) (featuregate.MutableVersionedFeatureGate, error) {
	gate, err := newDefaultFeatureGate()
	if err != nil {
		return nil, err
	}
	if err := gate.SetFromMap(settings); err != nil {
		return nil, err
	}
	return gate, nil
}

// newDefaultFeatureGate is the registry with every gate at its default.
func newDefaultFeatureGate() (featuregate.MutableVersionedFeatureGate, error) {
	gate := featuregate.NewVersionedFeatureGate(version.MustParse(upstreamBinaryVersion))
	if err := gate.AddVersioned(upstreamFeatureGates); err != nil {
		return nil, fmt.Errorf("registering feature gates: %w", err)
	}
	if err := gate.AddDependencies(upstreamFeatureDependencies); err != nil {
		return nil, fmt.Errorf("registering feature gate dependencies: %w", err)
	}
	return gate, nil
}

// KnownFeature reports whether name is a gate of upstream's registry.
func KnownFeature(name featuregate.Feature) bool {
	_, ok := upstreamFeatureGates[name]
	return ok
}

// KnownFeatures is the list --feature-gates' help shows, as upstream's.
func KnownFeatures() []string {
	gate, err := newDefaultFeatureGate()
	if err != nil {
		return nil
	}
	return gate.KnownFeatures()
}
