package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestZPages(t *testing.T) {
	srv := httptest.NewServer(NewHandler(HandlerOptions{Gatherer: nil, Mode: ModeNFTables, ZPages: &ZPages{
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
