package watch

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// BenchmarkListSlices lists 10k EndpointSlices of 10 endpoints each (as
// make bench-e2e seeds them, plus a managedFields entry as the API server
// writes one) in protobuf pages of ListPageSize from an HTTP server,
// through the typed client (client-go's List, decoded whole) and through
// rawPages; the parse is a no-op, so the difference is the decoding's.
// Compare B/op and ns/op: go test ./pkg/pipeline/watch -run X -bench ListSlices.
func BenchmarkListSlices(b *testing.B) {
	pages := encodedSlicePages(b, 10000, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		_, _ = w.Write(pages[i])
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf,
		AcceptContentTypes: runtime.ContentTypeProtobuf}, QPS: -1}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	keep := &discoveryv1.EndpointSlice{}
	parse := func(any) (any, error) { return keep, nil }
	for _, transport := range []string{"typed", "raw"} {
		b.Run(transport, func(b *testing.B) {
			api := client.DiscoveryV1().EndpointSlices("")
			lw := newPagedList[*discoveryv1.EndpointSliceList](api, api, func(*metav1.ListOptions) {}, parse)
			if transport == "raw" {
				rc := client.DiscoveryV1().RESTClient()
				lw.raw = newRawPages(rc, rc, "endpointslices", "EndpointSliceList", decodeItem[discoveryv1.EndpointSlice])
			}
			b.ReportAllocs()
			for b.Loop() {
				list, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if n := len(list.(*parsedList).Items); n != 10000 {
					b.Fatalf("listed %d slices", n)
				}
			}
		})
	}
}

// encodedSlicePages is n slices of eps endpoints as protobuf list pages of
// ListPageSize, each continued by the next page's index.
func encodedSlicePages(b *testing.B, n, eps int) [][]byte {
	ser := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	var pages [][]byte
	for from := 0; from < n; from += ListPageSize {
		list := &discoveryv1.EndpointSliceList{TypeMeta: metav1.TypeMeta{Kind: "EndpointSliceList", APIVersion: "discovery.k8s.io/v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
		if from+ListPageSize < n {
			list.Continue = strconv.Itoa(len(pages) + 1)
		}
		for i := from; i < min(n, from+ListPageSize); i++ {
			list.Items = append(list.Items, *benchListSlice(i, eps))
		}
		var buf bytes.Buffer
		if err := ser.Encode(list, &buf); err != nil {
			b.Fatal(err)
		}
		pages = append(pages, buf.Bytes())
	}
	return pages
}

func benchListSlice(i, eps int) *discoveryv1.EndpointSlice {
	name, port, proto, ready := "http", int32(8080), v1.ProtocolTCP, true
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%05d-abcde", i), Namespace: "bench",
			UID: "6f1c2d3e-4b5a-6978-8796-a5b4c3d2e1f0", ResourceVersion: strconv.Itoa(1000 + i), Generation: 1,
			Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%05d", i),
				discoveryv1.LabelManagedBy: "bench-e2e.svcproxy.test"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "discovery.k8s.io/v1", FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(strings.Repeat(`{"f:endpoints":{}}`, 20))}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for k := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", (i*eps+k)>>16&255, (i*eps+k)>>8&255, (i*eps+k)&255)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		})
	}
	return s
}
