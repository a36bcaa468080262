package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeStrictThenLenient(t *testing.T) {
	for _, tc := range []struct {
		name        string
		data        string
		wantLenient bool
		wantErr     string
		wantMode    string
	}{
		{name: "clean", data: header + "mode: ipvs\n", wantMode: "ipvs"},
		{name: "json", data: `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"nftables"}`, wantMode: "nftables"},
		{name: "unknown field", data: header + "mode: nftables\nfoo: bar\n", wantLenient: true, wantMode: "nftables"},
		{name: "duplicate field", data: header + "mode: ipvs\nmode: nftables\n", wantLenient: true, wantMode: "nftables"},
		{name: "unknown nested field", data: header + "iptables:\n  bogus: 1\n", wantLenient: true, wantMode: ""},
		{name: "wrong type is fatal", data: header + "mode: [a, b]\n", wantErr: "failed to decode"},
		{name: "missing kind is fatal", data: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nmode: ipvs\n", wantErr: "failed to decode"},
		{name: "other group is fatal", data: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", wantErr: "failed to decode"},
		{name: "not yaml is fatal", data: "{{{", wantErr: "failed to decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, strictErr, err := Decode([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if gotLenient := strictErr != nil; gotLenient != tc.wantLenient {
				t.Errorf("lenient = %v (strictErr %v), want %v", gotLenient, strictErr, tc.wantLenient)
			}
			if string(obj.Mode) != tc.wantMode {
				t.Errorf("mode = %q, want %q", obj.Mode, tc.wantMode)
			}
		})
	}
}

func TestDecodeStrictErrorNamesField(t *testing.T) {
	_, strictErr, err := Decode([]byte(header + "nosuchfield: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strictErr == nil || !strings.Contains(strictErr.Error(), "nosuchfield") {
		t.Errorf("strictErr = %v, want it to name the unknown field", strictErr)
	}
}

// TestEncodeRoundTrip checks that what --write-config-to writes decodes
// strictly to the same defaulted object, for every mode.
func TestEncodeRoundTrip(t *testing.T) {
	for _, mode := range []string{"iptables", "ipvs", "nftables"} {
		obj := mustDefaulted(t, "mode: "+mode+"\nclusterCIDR: 10.0.0.0/8\nfeatureGates: {LoggingBetaOptions: true}\n")
		ApplyPlatformDefaults(obj)
		data, err := EncodeYAML(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(data), "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n") ||
			!strings.Contains(string(data), "\nkind: KubeProxyConfiguration\n") {
			t.Errorf("%s: missing apiVersion/kind:\n%s", mode, data)
		}
		back, strictErr, err := Decode(data)
		if err != nil || strictErr != nil {
			t.Fatalf("%s: decode of encoded config: %v / strict %v", mode, err, strictErr)
		}
		SetDefaults(back) // a no-op on a complete object, as it is on load
		back.TypeMeta = obj.TypeMeta
		if diff := cmp.Diff(obj, back); diff != "" {
			t.Errorf("%s: round trip changed the config (-want +got):\n%s", mode, diff)
		}
	}
}
