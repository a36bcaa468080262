package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/svcproxy/svcproxy/internal/config"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://from-kubeconfig:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: secret}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`

func TestRESTConfigFromKubeconfig(t *testing.T) {
	path := writeFile(t, "kubeconfig", kubeconfig)
	cc := config.ClientConnection{ContentType: "application/json", AcceptContentTypes: "application/json", QPS: 7, Burst: 9}
	for _, tc := range []struct {
		master, wantHost string
	}{
		{"", "https://from-kubeconfig:6443"},
		{"https://override:443", "https://override:443"},
	} {
		rc, err := RESTConfig(&config.Config{Kubeconfig: path, Master: tc.master, ClientConnection: cc})
		if err != nil {
			t.Fatal(err)
		}
		if rc.Host != tc.wantHost || rc.BearerToken != "secret" {
			t.Errorf("master %q: host %q token %q", tc.master, rc.Host, rc.BearerToken)
		}
		if rc.ContentType != "application/json" || rc.AcceptContentTypes != "application/json" || rc.QPS != 7 || rc.Burst != 9 {
			t.Errorf("client connection settings not applied: %+v", rc.ContentConfig)
		}
		if rc.UserAgent != rest.DefaultKubernetesUserAgent() {
			t.Errorf("user agent %q, want client-go's default %q", rc.UserAgent, rest.DefaultKubernetesUserAgent())
		}
	}
}

func TestRESTConfigMasterOnly(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	rc, err := RESTConfig(&config.Config{Master: "http://127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "http://127.0.0.1:8080" {
		t.Errorf("host %q", rc.Host)
	}
}

func TestRESTConfigInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	_, err := RESTConfig(&config.Config{})
	if !errors.Is(err, rest.ErrNotInCluster) {
		t.Errorf("err = %v, want rest.ErrNotInCluster (in-cluster path taken)", err)
	}
}

func TestRESTConfigMissingKubeconfig(t *testing.T) {
	if _, err := RESTConfig(&config.Config{Kubeconfig: "/nonexistent/kubeconfig"}); err == nil {
		t.Error("missing kubeconfig accepted")
	}
}

// TestUnthrottled: the client for a list's later pages never waits for a
// token, and the client's own configuration keeps its limits.
func TestUnthrottled(t *testing.T) {
	rc := &rest.Config{Host: "https://api:6443", QPS: 0.001, Burst: 1}
	un := unthrottled(rc)
	for i := range 100 {
		if !un.RateLimiter.TryAccept() {
			t.Fatalf("request %d held back", i)
		}
	}
	if rc.RateLimiter != nil || rc.QPS != 0.001 || rc.Burst != 1 {
		t.Errorf("the original configuration changed: %+v", rc)
	}
}

// TestClientsSendTheUserAgent: both clients' requests carry client-go's
// default user agent, as upstream's (they went out as Go-http-client/1.1
// when the shared HTTP client was built before any clientset's defaults).
func TestClientsSendTheUserAgent(t *testing.T) {
	agents := listWithBothClients(t, `{server: "%s", insecure-skip-tls-verify: true}`, (*http.Request).UserAgent)
	for _, got := range agents {
		if want := rest.DefaultKubernetesUserAgent(); got != want {
			t.Errorf("user agent %q, want %q", got, want)
		}
	}
}

// TestKubeconfigCanTurnCompressionOff: a kubeconfig cluster's
// disable-compression (kubectl's and client-go's field since 1.26) reaches
// both clients' requests, for an operator who would rather spend bytes
// than the API server's CPU. By default the clients ask for gzip, as
// upstream's do.
func TestKubeconfigCanTurnCompressionOff(t *testing.T) {
	encoding := func(r *http.Request) string { return r.Header.Get("Accept-Encoding") }
	for _, tc := range []struct {
		cluster string
		want    string
	}{
		{`{server: "%s", insecure-skip-tls-verify: true}`, "gzip"},
		{`{server: "%s", insecure-skip-tls-verify: true, disable-compression: true}`, ""},
	} {
		for _, got := range listWithBothClients(t, tc.cluster, encoding) {
			if got != tc.want {
				t.Errorf("cluster %s: Accept-Encoding %q, want %q", tc.cluster, got, tc.want)
			}
		}
	}
}

// listWithBothClients builds svcproxy's two API clients from a kubeconfig
// whose cluster is cluster (%s: the server's URL), lists Services with
// each against a TLS server (over plain HTTP client-go uses Go's default
// transport, whatever the config) and returns what see made of each
// request.
func listWithBothClients(t *testing.T, cluster string, see func(*http.Request) string) []string {
	t.Helper()
	seen := make(chan string, 2)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- see(r)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[]}`))
	}))
	defer srv.Close()
	kc := strings.Replace(kubeconfig, `{server: "https://from-kubeconfig:6443", insecure-skip-tls-verify: true}`, fmt.Sprintf(cluster, srv.URL), 1)
	rc, err := RESTConfig(&config.Config{Kubeconfig: writeFile(t, "kubeconfig", kc), ClientConnection: config.ClientConnection{QPS: 5, Burst: 10}})
	if err != nil {
		t.Fatal(err)
	}
	client, pages, err := newClients(rc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range []kubernetes.Interface{client, pages} {
		if _, err := c.CoreV1().Services("").List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		out = append(out, <-seen)
	}
	return out
}
