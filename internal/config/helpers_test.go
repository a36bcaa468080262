package config

import (
	"testing"

	"k8s.io/kube-proxy/config/v1alpha1"
)

const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// mustDefaulted decodes body (after the apiVersion/kind header) and applies
// the v1alpha1 defaults.
func mustDefaulted(t *testing.T, body string) *v1alpha1.KubeProxyConfiguration {
	t.Helper()
	obj, strictErr, err := Decode([]byte(header + body))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if strictErr != nil {
		t.Fatalf("Decode needed lenient decoding: %v", strictErr)
	}
	SetDefaults(obj)
	return obj
}

// mustComplete is mustDefaulted followed by Complete.
func mustComplete(t *testing.T, body string) *Config {
	t.Helper()
	cfg, err := Complete(mustDefaulted(t, body))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return cfg
}
