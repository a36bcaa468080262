package contract

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// response is what an endpoint answered.
type response struct {
	code        int
	contentType string
	body        string
	header      http.Header
}

// get fetches url from the ext namespace, with an Accept header unless
// accept is empty.
func get(c *F.Cluster, url, accept string) (response, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: F.DialerIn(c.NS("ext")), DisableKeepAlives: true, Proxy: nil}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return response{}, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return response{code: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: string(body), header: resp.Header}, err
}

// shape is what must match between the two answers: the status, the
// content type and, for JSON, every key path with its value's kind; for
// other bodies the text itself unless it varies (timestamps, versions).
func shape(r response, exactText bool) string {
	s := fmt.Sprintf("%d %s", r.code, r.contentType)
	var v any
	if json.Unmarshal([]byte(r.body), &v) == nil && strings.HasPrefix(strings.TrimSpace(r.body), "{") {
		return s + " json " + strings.Join(jsonPaths("", v), " ")
	}
	if exactText {
		return s + " text " + strings.TrimSpace(r.body)
	}
	return s
}

func jsonPaths(prefix string, v any) []string {
	switch x := v.(type) {
	case map[string]any:
		var out []string
		for k, e := range x {
			out = append(out, jsonPaths(prefix+"."+k, e)...)
		}
		sort.Strings(out)
		return out
	case []any:
		if len(x) == 0 {
			return []string{prefix + "[]"}
		}
		return jsonPaths(prefix+"[]", x[0])
	default:
		return []string{fmt.Sprintf("%s:%T", prefix, v)}
	}
}

// compareEndpoints compares the metrics port's paths, :10256 and the
// healthCheckNodePort of both nodes.
func compareEndpoints(t *testing.T, c *F.Cluster, up, ours *F.Node, hcnp int32, diffs *differences) {
	const z = ";g=config.k8s.io;v=v1beta1"
	for _, ep := range []struct {
		port      string
		path      string
		exactText bool
		accept    string // the z-pages negotiate: text, JSON, YAML or 406
	}{
		{"10249", "/healthz", true, ""},
		{"10249", "/proxyMode", true, ""},
		{"10249", "/configz", false, ""},
		{"10249", "/flagz", false, ""},
		{"10249", "/flagz", false, "application/json" + z + ";as=Flagz"},
		{"10249", "/flagz", false, "application/json;g=config.k8s.io;v=v1alpha1;as=Flagz"},
		{"10249", "/flagz", false, "application/yaml" + z + ";as=Flagz"},
		{"10249", "/flagz", true, "application/json"},
		{"10249", "/statusz", false, ""},
		{"10249", "/statusz", false, "application/json" + z + ";as=Statusz"},
		{"10249", "/statusz", true, "application/json" + z + ";as=Flagz"},
		{"10249", "/metrics/slis", false, ""},
		{"10256", "/healthz", false, ""},
		{"10256", "/livez", false, ""},
		{fmt.Sprint(hcnp), "/", true, ""},
	} {
		u, err := get(c, fmt.Sprintf("http://%s:%s%s", up.IP, ep.port, ep.path), ep.accept)
		if err != nil {
			t.Fatalf("upstream %s%s: %v", ep.port, ep.path, err)
		}
		o, err := get(c, fmt.Sprintf("http://%s:%s%s", ours.IP, ep.port, ep.path), ep.accept)
		if err != nil {
			t.Fatalf("svcproxy %s%s: %v", ep.port, ep.path, err)
		}
		key := "endpoint :" + ep.port + ep.path
		if ep.port == fmt.Sprint(hcnp) {
			key = "endpoint healthCheckNodePort"
		}
		if ep.accept != "" {
			key += " Accept " + ep.accept
		}
		var found []string
		if us, os := shape(u, ep.exactText), shape(o, ep.exactText); us != os {
			found = append(found, fmt.Sprintf("upstream %q (%s), svcproxy %q (%s)", us, trimmed(u.body), os, trimmed(o.body)))
		}
		for _, h := range []string{"X-Load-Balancing-Endpoint-Weight", "Warning"} {
			if u.header.Get(h) != o.header.Get(h) {
				found = append(found, fmt.Sprintf("%s: upstream %q, svcproxy %q", h, u.header.Get(h), o.header.Get(h)))
			}
		}
		diffs.report(t, key, found)
	}
}
