package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// The transports a pagedList reads its pages through in these tests: the
// typed client (the fake's), and REST clients against an HTTP server that
// serves the same fake's pages in protobuf or in JSON.
var pageTransports = []string{"typed", "protobuf", "json"}

// pagedListOver returns a pagedList of api's Services read through
// transport.
func pagedListOver(t *testing.T, transport string, api *pagedServices, tweak func(*metav1.ListOptions),
	parse func(any) (any, error)) *pagedList[*v1.ServiceList] {
	t.Helper()
	lw := newPagedList(api, unlimited{api}, tweak, parse)
	if transport == "typed" {
		return lw
	}
	srv := httptest.NewServer(servePages(t, api))
	t.Cleanup(srv.Close)
	var walked atomic.Int64 // items decoded one by one from a walked protobuf page
	lw.raw = newRawPages(restClient(t, srv.URL, "limited", transport), restClient(t, srv.URL, "unlimited", transport),
		"services", "ServiceList", func(b []byte) (runtime.Object, error) {
			walked.Add(1)
			return decodeItem[v1.Service](b)
		})
	if lw.raw == nil {
		t.Fatal("no raw page reader over real REST clients")
	}
	t.Cleanup(func() {
		if n := walked.Load(); (n > 0) != (transport == "protobuf") {
			t.Errorf("%d items walked in protobuf pages over %s", n, transport)
		}
	})
	return lw
}

// restClient is a core/v1 REST client of url that says who it is in its
// User-Agent and asks for encoding ("protobuf" or "json").
func restClient(t *testing.T, url, who, encoding string) rest.Interface {
	t.Helper()
	ct := runtime.ContentTypeJSON
	if encoding == "protobuf" {
		ct = runtime.ContentTypeProtobuf
	}
	c, err := rest.RESTClientFor(&rest.Config{Host: url, APIPath: "/api", UserAgent: who,
		ContentConfig: rest.ContentConfig{GroupVersion: &v1.SchemeGroupVersion, ContentType: ct,
			AcceptContentTypes: ct, NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// servePages answers GET /api/v1/services with api's pages, in protobuf
// or JSON as the request accepts, and api's errors as Status objects.
func servePages(t *testing.T, api *pagedServices) http.HandlerFunc {
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	return func(w http.ResponseWriter, r *http.Request) {
		var o metav1.ListOptions
		if err := scheme.ParameterCodec.DecodeParameters(r.URL.Query(), v1.SchemeGroupVersion, &o); err != nil {
			t.Errorf("query %q: %v", r.URL.RawQuery, err)
		}
		list, err := api.list(r.Context(), o, r.UserAgent())
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			w.Header().Set("Content-Type", runtime.ContentTypeJSON)
			w.WriteHeader(int(status.Status().Code))
			_ = json.NewEncoder(w).Encode(status.Status())
			return
		}
		list.Kind, list.APIVersion = "ServiceList", "v1"
		if strings.Contains(r.Header.Get("Accept"), "protobuf") {
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			err = pb.Encode(list, w)
		} else {
			w.Header().Set("Content-Type", runtime.ContentTypeJSON)
			err = json.NewEncoder(w).Encode(list)
		}
		if err != nil {
			t.Errorf("encoding a page: %v", err)
		}
	}
}

// encodedPage is a protobuf page of n Services as the API server sends it.
func encodedPage(t testing.TB, n int) []byte {
	t.Helper()
	api := &pagedServices{n: n, rv: "5", parsed: new(int)}
	list, _ := api.list(context.Background(), metav1.ListOptions{Limit: int64(n - 1)}, "")
	list.Kind, list.APIVersion = "ServiceList", "v1"
	var b bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(list, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRawPageWalk: a protobuf page is walked into its items and list
// metadata.
func TestRawPageWalk(t *testing.T) {
	r := &rawPages{listKind: "ServiceList", decodeItem: decodeItem[v1.Service]}
	var names []string
	lm, err := r.walkList(encodedPage(t, 3)[len(protobufMagic):], func(obj runtime.Object) error {
		names = append(names, obj.(*v1.Service).Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "svc-00000,svc-00001" || lm.ResourceVersion != "5" || lm.Continue != "2" ||
		lm.RemainingItemCount == nil || *lm.RemainingItemCount != 1 {
		t.Errorf("walked %v with %+v, want 2 Services, resourceVersion 5, continue 2, 1 remaining", names, lm)
	}
}

// TestRawPageRefusesOddBodies: what the walk refuses rather than
// half-reads.
func TestRawPageRefusesOddBodies(t *testing.T) {
	page := encodedPage(t, 3)[len(protobufMagic):]
	// A second envelope field 1 (typeMeta) naming another kind: a field
	// repeated later wins, as in protobuf.
	otherKind := append(append([]byte(nil), page...), protowireBytes(1, []byte("\x12\x0bServiceSpec"))...)
	encoded := append(append([]byte(nil), page...), protowireBytes(3, []byte("gzip"))...)
	for name, b := range map[string][]byte{
		"truncated":        page[:len(page)-7],
		"other kind":       otherKind,
		"content encoding": encoded,
		"not a message":    {0xff, 0xff, 0xff},
	} {
		r := &rawPages{listKind: "ServiceList", decodeItem: decodeItem[v1.Service]}
		if _, err := r.walkList(b, func(runtime.Object) error { return nil }); err == nil {
			t.Errorf("%s: walked without an error", name)
		}
	}
}

// protowireBytes is field num of wire type bytes holding v.
func protowireBytes(num byte, v []byte) []byte {
	return append([]byte{num<<3 | 2, byte(len(v))}, v...)
}

// FuzzRawPageWalk: no body makes the walk panic, and whatever it yields
// is a Service.
func FuzzRawPageWalk(f *testing.F) {
	f.Add(encodedPage(f, 3)[len(protobufMagic):])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &rawPages{listKind: "ServiceList", decodeItem: decodeItem[v1.Service]}
		_, _ = r.walkList(b, func(obj runtime.Object) error {
			if _, ok := obj.(*v1.Service); !ok {
				t.Errorf("yielded a %T", obj)
			}
			return nil
		})
	})
}

// TestRawPagesNeedRealClients: a fake clientset's REST clients (nil
// pointers) leave the typed clients to list.
func TestRawPagesNeedRealClients(t *testing.T) {
	var fake *rest.RESTClient
	if r := newRawPages(fake, fake, "services", "ServiceList", decodeItem[v1.Service]); r != nil {
		t.Error("a raw page reader over nil REST clients")
	}
}
