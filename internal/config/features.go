package config

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// Feature gates svcproxy knows about. Upstream kube-proxy shares the global
// Kubernetes gate registry, so any Kubernetes gate name is accepted there;
// installers commonly pass the cluster-wide gate list to every component.
// svcproxy therefore validates the gates it knows and only warns about
// others (see UnknownFeatureGates) instead of refusing to start.
const (
	// PreferSameTrafficDistribution enables trafficDistribution
	// PreferSameZone / PreferSameNode.
	PreferSameTrafficDistribution featuregate.Feature = "PreferSameTrafficDistribution"
	// ServiceTrafficDistribution enables spec.trafficDistribution.
	ServiceTrafficDistribution featuregate.Feature = "ServiceTrafficDistribution"
	// LoadBalancerIPMode honours status.loadBalancer.ingress[].ipMode.
	LoadBalancerIPMode featuregate.Feature = "LoadBalancerIPMode"
	// MultiCIDRServiceAllocator enables ServiceCIDR objects.
	MultiCIDRServiceAllocator featuregate.Feature = "MultiCIDRServiceAllocator"
)

func proxyFeatureGates() map[featuregate.Feature]featuregate.VersionedSpecs {
	return map[featuregate.Feature]featuregate.VersionedSpecs{
		PreferSameTrafficDistribution: {
			{Version: version.MustParse("1.33"), Default: false, PreRelease: featuregate.Alpha},
			{Version: version.MustParse("1.34"), Default: true, PreRelease: featuregate.Beta},
		},
		ServiceTrafficDistribution: {
			{Version: version.MustParse("1.30"), Default: false, PreRelease: featuregate.Alpha},
			{Version: version.MustParse("1.31"), Default: true, PreRelease: featuregate.Beta},
			{Version: version.MustParse("1.33"), Default: true, PreRelease: featuregate.GA},
		},
		LoadBalancerIPMode: {
			{Version: version.MustParse("1.29"), Default: false, PreRelease: featuregate.Alpha},
			{Version: version.MustParse("1.30"), Default: true, PreRelease: featuregate.Beta},
			{Version: version.MustParse("1.32"), Default: true, PreRelease: featuregate.GA},
		},
		MultiCIDRServiceAllocator: {
			{Version: version.MustParse("1.27"), Default: false, PreRelease: featuregate.Alpha},
			{Version: version.MustParse("1.31"), Default: false, PreRelease: featuregate.Beta},
			{Version: version.MustParse("1.33"), Default: true, PreRelease: featuregate.GA},
		},
	}
}

// NewFeatureGate returns a gate holding svcproxy's known features (plus the
// logging gates of component-base) with the known entries of settings
// applied. Unknown names are ignored here; see UnknownFeatureGates.
func NewFeatureGate(settings map[string]bool) (featuregate.MutableVersionedFeatureGate, error) {
	return newFeatureGate(settings)
}

func newFeatureGate(settings map[string]bool) (featuregate.MutableVersionedFeatureGate, error) {
	gate := featuregate.NewFeatureGate()
	if err := gate.AddVersioned(proxyFeatureGates()); err != nil {
		return nil, fmt.Errorf("registering feature gates: %w", err)
	}
	if err := logsapi.AddFeatureGates(gate); err != nil {
		return nil, fmt.Errorf("registering logging feature gates: %w", err)
	}
	known := map[string]bool{}
	for name := range gate.GetAllVersioned() {
		if v, ok := settings[string(name)]; ok {
			known[string(name)] = v
		}
	}
	if err := gate.SetFromMap(known); err != nil {
		return nil, fmt.Errorf("featureGates: %w", err)
	}
	return gate, nil
}

func validateFeatureGates(settings map[string]bool) error {
	_, err := newFeatureGate(settings)
	return err
}

// UnknownFeatureGates lists, sorted, the names in settings that svcproxy
// does not know; the caller logs them as a warning.
func UnknownFeatureGates(settings map[string]bool) []string {
	gate, err := newFeatureGate(nil)
	if err != nil {
		return slices.Sorted(maps.Keys(settings))
	}
	all := gate.GetAllVersioned()
	var unknown []string
	for name := range settings {
		if _, ok := all[featuregate.Feature(name)]; !ok {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return unknown
}
