package app

import (
	"testing"

	clientfeatures "k8s.io/client-go/features"
	"k8s.io/component-base/featuregate"

	"github.com/svcproxy/svcproxy/internal/config"
)

// fixedGates answers every gate with one value.
type fixedGates bool

func (g fixedGates) Enabled(clientfeatures.Feature) bool { return bool(g) }

// TestFeatureGatesReachClientGo: --feature-gates decides client-go's gates
// as upstream's binary does; one upstream's registry lacks keeps client-go's
// own answer.
func TestFeatureGatesReachClientGo(t *testing.T) {
	gate, err := config.NewFeatureGate(map[string]bool{"WatchListClient": false, "ClientsAllowCBOR": true})
	if err != nil {
		t.Fatal(err)
	}
	g := clientGoGates{gate: gate, known: config.KnownFeature, fallback: fixedGates(true)}
	for _, tc := range []struct {
		feature clientfeatures.Feature
		want    bool
	}{
		{clientfeatures.WatchListClient, false},
		{clientfeatures.ClientsAllowCBOR, true},
		{clientfeatures.ClientsPreferCBOR, false}, // upstream's default
		{clientfeatures.InOrderInformers, true},   // upstream's default
		{"NotAKubernetesGate", true},              // the fallback's
	} {
		if got := g.Enabled(tc.feature); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.feature, got, tc.want)
		}
	}

	// Process-wide, as applyGlobals installs it.
	orig := clientfeatures.FeatureGates()
	t.Cleanup(func() { clientfeatures.ReplaceFeatureGates(orig) })
	useGatesForClientGo(gate, config.KnownFeature)
	if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Error("client-go still streams lists with --feature-gates=WatchListClient=false")
	}
}

// gateNames records the gates client-go registers (a VersionedRegistry).
type gateNames []clientfeatures.Feature

func (n *gateNames) AddVersioned(in map[clientfeatures.Feature]clientfeatures.VersionedSpecs) error {
	for f := range in {
		*n = append(*n, f)
	}
	return nil
}

// TestClientGoGatesAreKnown: every gate the client-go in go.mod defines is
// in upstream's registry (zz_generated_features.go), so --feature-gates
// decides each of them and none falls back to client-go's environment
// variables.
func TestClientGoGatesAreKnown(t *testing.T) {
	var names gateNames
	if err := clientfeatures.AddVersionedFeaturesToExistingFeatureGates(&names); err != nil {
		t.Fatal(err)
	}
	if len(names) < 5 {
		t.Fatalf("client-go registered %d gates: %v", len(names), names)
	}
	for _, f := range names {
		if !config.KnownFeature(featuregate.Feature(f)) {
			t.Errorf("client-go gate %s is not in upstream's registry", f)
		}
	}
}
