package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func TestZPages(t *testing.T) {
	srv := httptest.NewServer(NewHandler(HandlerOptions{Gatherer: nil, Mode: string(proxy.ModeNFTables), ZPages: &ZPages{
		Component: "kube-proxy", Flags: map[string]string{"proxy-mode": "nftables", "v": "2"},
		Started: time.Now().Add(-61 * time.Second), BinaryVersion: "v0.1.0", EmulationVersion: "1.37",
		Paths: []string{"/metrics"},
	}}))
	defer srv.Close()
	for path, want := range map[string][]string{
		"/flagz":   {"\nkube-proxy flagz\nWarning: ", "proxy-mode", "nftables\n", "\nv"},
		"/statusz": {"\nkube-proxy statusz\n", "0 hr 01 min 01 sec", "Binary version", "v0.1.0", "Emulation version", "1.37", "/metrics"},
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("%s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s lacks %q:\n%s", path, w, b.String())
			}
		}
	}
}

// TestZPageNegotiation compares /flagz's answers with those of upstream's
// handler (k8s.io/apiserver v0.37.1 flagz.Install with the same flags,
// recorded with a Go client): status, Content-Type, Warning and body.
func TestZPageNegotiation(t *testing.T) {
	srv := httptest.NewServer(NewHandler(HandlerOptions{Mode: string(proxy.ModeNFTables), ZPages: &ZPages{
		Component: "kube-proxy", Flags: map[string]string{"config": "/x", "v": "2"}, Started: time.Now(),
	}}))
	defer srv.Close()
	const (
		v1beta1JSON = `{"kind":"Flagz","apiVersion":"config.k8s.io/v1beta1","metadata":{"name":"kube-proxy"},"flags":{"config":"/x","v":"2"}}` + "\n"
		status406   = "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \"status\": \"Failure\",\n" +
			"  \"message\": \"only the following media types are accepted: application/json, application/yaml, text/plain\",\n" +
			"  \"reason\": \"NotAcceptable\",\n  \"code\": 406\n}"
		beta = ";g=config.k8s.io;v=v1beta1;as=Flagz"
	)
	for _, c := range []struct {
		accept, userAgent          string
		code                       int
		contentType, warning, body string
	}{
		{accept: "", code: 200, contentType: "text/plain; charset=utf-8", body: "\nkube-proxy flagz\n"},
		{accept: "*/*", code: 200, contentType: "text/plain; charset=utf-8", body: "\nkube-proxy flagz\n"},
		{accept: "application/json" + beta, code: 200, contentType: "application/json" + beta, body: v1beta1JSON},
		{accept: "text/plain;q=0.5, application/json;as=Flagz;g=config.k8s.io;v=v1beta1", code: 200,
			contentType: "application/json" + beta, body: v1beta1JSON},
		{accept: "application/json;as=Flagz;v=v1alpha1;g=config.k8s.io", code: 200,
			contentType: "application/json;g=config.k8s.io;v=v1alpha1;as=Flagz",
			warning:     `299 - "This version of the flagz endpoint is deprecated. Please use a newer version."`,
			body:        `{"kind":"Flagz","apiVersion":"config.k8s.io/v1alpha1","metadata":{"name":"kube-proxy"},"flags":{"config":"/x","v":"2"}}` + "\n"},
		{accept: "application/json" + beta, userAgent: "curl/8.0", code: 200, contentType: "application/json" + beta,
			body: "{\n  \"kind\": \"Flagz\",\n  \"apiVersion\": \"config.k8s.io/v1beta1\",\n  \"metadata\": {\n    \"name\": \"kube-proxy\"\n  },\n" +
				"  \"flags\": {\n    \"config\": \"/x\",\n    \"v\": \"2\"\n  }\n}"},
		{accept: "application/yaml;as=Flagz;v=v1beta1;g=config.k8s.io", code: 200, contentType: "application/yaml" + beta,
			body: "apiVersion: config.k8s.io/v1beta1\nflags:\n  config: /x\n  v: \"2\"\nkind: Flagz\nmetadata:\n  name: kube-proxy\n"},
		{accept: "application/json", code: 406, contentType: "application/json",
			body: `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"only the following media types are accepted: application/json, application/yaml, text/plain","reason":"NotAcceptable","code":406}` + "\n"},
		{accept: "application/yaml", code: 406, contentType: "application/yaml",
			body: "apiVersion: v1\ncode: 406\nkind: Status\nmessage: 'only the following media types are accepted: application/json, application/yaml,\n  text/plain'\nmetadata: {}\nreason: NotAcceptable\nstatus: Failure\n"},
		{accept: "text/html", code: 406, contentType: "application/json", body: status406},
		{accept: "application/json;as=Flagz;g=config.k8s.io", code: 406, contentType: "application/json", body: status406},
		{accept: "application/json;as=Statusz;v=v1beta1;g=config.k8s.io", code: 406, contentType: "application/json", body: status406},
		{accept: "application/cbor" + beta, code: 406, contentType: "application/json", body: status406},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/flagz", nil)
		if c.accept != "" {
			req.Header.Set("Accept", c.accept)
		}
		req.Header.Set("User-Agent", c.userAgent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != c.code || resp.Header.Get("Content-Type") != c.contentType || resp.Header.Get("Warning") != c.warning {
			t.Errorf("Accept %q: %d %q warning %q; want %d %q %q", c.accept, resp.StatusCode,
				resp.Header.Get("Content-Type"), resp.Header.Get("Warning"), c.code, c.contentType, c.warning)
		}
		if got := string(body); got != c.body && !(strings.HasPrefix(c.contentType, "text/") && strings.HasPrefix(got, c.body)) {
			t.Errorf("Accept %q: body\n%s\nwant\n%s", c.accept, got, c.body)
		}
	}
}

// TestStatuszStructured checks the fields of the structured /statusz.
func TestStatuszStructured(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	srv := httptest.NewServer(NewHandler(HandlerOptions{Mode: string(proxy.ModeNFTables), ZPages: &ZPages{
		Component: "kube-proxy", Started: started, BinaryVersion: "1.37.1", EmulationVersion: "1.37", Paths: []string{"/flagz", "/metrics"},
	}}))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/statusz", nil)
	req.Header.Set("Accept", "application/json;as=Statusz;v=v1beta1;g=config.k8s.io")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	want := `{"kind":"Statusz","apiVersion":"config.k8s.io/v1beta1","metadata":{"name":"kube-proxy"},"startTime":"2026-01-02T03:04:05Z","uptimeSeconds":`
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), want) ||
		!strings.Contains(string(body), `"binaryVersion":"1.37.1","emulationVersion":"1.37","paths":["/flagz","/metrics"]}`) {
		t.Errorf("statusz: %d %s", resp.StatusCode, body)
	}
}
