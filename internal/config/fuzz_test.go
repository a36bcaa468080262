package config

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzDecode feeds arbitrary bytes through the whole load path. Properties:
// nothing panics, and a config that completes survives a round trip through
// --write-config-to's encoding unchanged. Seeds live in testdata/fuzz.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(header + "mode: nftables\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, _, err := Decode(data)
		if err != nil {
			return
		}
		SetDefaults(obj)
		cfg, err := Complete(obj)
		if err != nil {
			return
		}
		encoded, err := EncodeYAML(cfg.Versioned)
		if err != nil {
			t.Fatalf("encoding a valid config: %v", err)
		}
		back, strictErr, err := Decode(encoded)
		if err != nil || strictErr != nil {
			t.Fatalf("decoding our own output: %v / %v\n%s", err, strictErr, encoded)
		}
		SetDefaults(back)
		cfg2, err := Complete(back)
		if err != nil {
			t.Fatalf("our own output does not validate: %v\n%s", err, encoded)
		}
		opts := []cmp.Option{
			cmpopts.IgnoreFields(Config{}, "Versioned", "FeatureGate", "ModeDefaulted"),
			cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}),
			cmpopts.EquateEmpty(),
		}
		if diff := cmp.Diff(cfg, cfg2, opts...); diff != "" {
			t.Fatalf("round trip changed Config (-first +second):\n%s", diff)
		}
	})
}
