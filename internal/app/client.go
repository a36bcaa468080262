package app

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/svcproxy/svcproxy/internal/config"
)

// RESTConfig builds the API client configuration the way kube-proxy does:
// --kubeconfig (clientConnection.kubeconfig) with --master overriding its
// server URL; both empty means in-cluster configuration. Content types, QPS
// and burst come from clientConnection.
func RESTConfig(cfg *config.Config) (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	if cfg.Kubeconfig == "" && cfg.Master == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}
		overrides := &clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: cfg.Master}}
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("building API client configuration: %w", err)
	}
	cc := cfg.ClientConnection
	rc.AcceptContentTypes = cc.AcceptContentTypes
	rc.ContentType = cc.ContentType
	rc.QPS = cc.QPS
	rc.Burst = int(cc.Burst)
	// What client-go's NewForConfig would set: the HTTP client both
	// clientsets share is built from rc itself, before any clientset's
	// defaults, and without it every request went out as Go-http-client.
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rc, nil
}

// unthrottled is rc without a client-side rate limiter, for the pages of a
// list after its first (watch.Options.ContinuePages): a streaming list
// takes one token of the limiter whatever its size, and a list read in
// pages takes one too.
func unthrottled(rc *rest.Config) *rest.Config {
	out := rest.CopyConfig(rc)
	out.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	return out
}

// newClients makes the API client and the one for a list's later pages
// (unthrottled) on one HTTP client, so that both share its connection.
func newClients(rc *rest.Config) (client, pages kubernetes.Interface, err error) {
	httpClient, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("creating API client: %w", err)
	}
	if client, err = kubernetes.NewForConfigAndClient(rc, httpClient); err != nil {
		return nil, nil, fmt.Errorf("creating API client: %w", err)
	}
	if pages, err = kubernetes.NewForConfigAndClient(unthrottled(rc), httpClient); err != nil {
		return nil, nil, fmt.Errorf("creating API client: %w", err)
	}
	return client, pages, nil
}
