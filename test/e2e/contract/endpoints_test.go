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

func get(c *F.Cluster, url string) (response, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: F.DialerIn(c.NS("ext")), DisableKeepAlives: true, Proxy: nil}}
	resp, err := client.Get(url)
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
	for _, ep := range []struct {
		port      string
		path      string
		exactText bool
	}{
		{"10249", "/healthz", true},
		{"10249", "/proxyMode", true},
		{"10249", "/configz", false},
		{"10249", "/flagz", false},
		{"10249", "/statusz", false},
		{"10249", "/metrics/slis", false},
		{"10256", "/healthz", false},
		{"10256", "/livez", false},
		{fmt.Sprint(hcnp), "/", true},
	} {
		u, err := get(c, fmt.Sprintf("http://%s:%s%s", up.IP, ep.port, ep.path))
		if err != nil {
			t.Fatalf("upstream %s%s: %v", ep.port, ep.path, err)
		}
		o, err := get(c, fmt.Sprintf("http://%s:%s%s", ours.IP, ep.port, ep.path))
		if err != nil {
			t.Fatalf("svcproxy %s%s: %v", ep.port, ep.path, err)
		}
		key := "endpoint :" + ep.port + ep.path
		if ep.port == fmt.Sprint(hcnp) {
			key = "endpoint healthCheckNodePort"
		}
		var found []string
		if us, os := shape(u, ep.exactText), shape(o, ep.exactText); us != os {
			found = append(found, fmt.Sprintf("upstream %q (%s), svcproxy %q (%s)", us, trimmed(u.body), os, trimmed(o.body)))
		}
		if w := "X-Load-Balancing-Endpoint-Weight"; u.header.Get(w) != o.header.Get(w) {
			found = append(found, fmt.Sprintf("%s: upstream %q, svcproxy %q", w, u.header.Get(w), o.header.Get(w)))
		}
		diffs.report(t, key, found)
	}
}
