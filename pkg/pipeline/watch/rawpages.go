package watch

// Reading a list page as the API server sent it.
//
// A typed client's List reads the whole response into a new buffer
// (io.ReadAll, growing by doubling), copies the object out of the protobuf
// envelope (runtime.Unknown's Raw) and decodes it into one list whose Items
// array of 2,000 structs is grown by doubling too; the page is then walked
// and each item parsed. At 50k Services × 10 endpoints those three copies
// were a third of everything a start allocated, each page's garbage
// the collector had to find. Here a page is read into one buffer kept for
// the whole list, the envelope and the list message are walked in place
// (google.golang.org/protobuf's protowire) and each item is decoded on its
// own, by its generated Unmarshal, and handed to the caller before the next
// one: the only copies left are the decoded item's own fields.
//
// Anything but a protobuf body (an operator's clientConnection.contentType
// of JSON) is decoded whole by client-go's codecs, as the typed client
// would.

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// rawPages lists one resource through REST clients: first for a list's
// first page (the rate-limited client), more for its continuations.
type rawPages struct {
	first, more rest.Interface
	resource    string
	// listKind is the kind a protobuf envelope must name ("ServiceList").
	listKind string
	// decodeItem decodes one list item from its protobuf bytes.
	decodeItem func([]byte) (runtime.Object, error)
}

// newRawPages returns the raw page reader of resource through first and
// more, or nil when either is not a real REST client (a fake clientset's
// is a nil pointer): the typed clients list then.
func newRawPages(first, more rest.Interface, resource, listKind string,
	decodeItem func([]byte) (runtime.Object, error)) *rawPages {
	if !isRESTClient(first) || !isRESTClient(more) {
		return nil
	}
	return &rawPages{first: first, more: more, resource: resource, listKind: listKind, decodeItem: decodeItem}
}

func isRESTClient(c rest.Interface) bool {
	rc, ok := c.(*rest.RESTClient)
	return ok && rc != nil
}

// protoItem is a generated API type: its pointer decodes itself.
type protoItem[T any] interface {
	*T
	runtime.Object
	Unmarshal([]byte) error
}

// decodeItem decodes one T from its protobuf bytes.
func decodeItem[T any, P protoItem[T]](b []byte) (runtime.Object, error) {
	obj := P(new(T))
	if err := obj.Unmarshal(b); err != nil {
		return nil, err
	}
	return obj, nil
}

// protobufMagic starts every protobuf body of the API server
// (k8s.io/apimachinery's protobuf serializer).
var protobufMagic = []byte{0x6b, 0x38, 0x73, 0x00}

// page reads the page o asks for into buf (reused from page to page),
// calls yield with each item and returns the page's list metadata.
func (r *rawPages) page(ctx context.Context, o metav1.ListOptions, continued bool, buf *bytes.Buffer,
	yield func(runtime.Object) error) (metav1.ListMeta, error) {
	c := r.first
	if continued {
		c = r.more
	}
	req := c.Get().Resource(r.resource).VersionedParams(&o, scheme.ParameterCodec)
	if o.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*o.TimeoutSeconds) * time.Second)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return metav1.ListMeta{}, err
	}
	buf.Reset()
	_, err = buf.ReadFrom(body)
	if cerr := body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("reading a %s page: %w", r.resource, err)
	}
	b := buf.Bytes()
	if !bytes.HasPrefix(b, protobufMagic) {
		return decodeWhole(b, yield)
	}
	lm, err := r.walkList(b[len(protobufMagic):], yield)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("decoding a %s page: %w", r.resource, err)
	}
	return lm, nil
}

// walkList walks the runtime.Unknown envelope (1 typeMeta, 2 raw,
// 3 contentEncoding, 4 contentType) and the list in its raw field
// (1 metadata, 2 items).
func (r *rawPages) walkList(b []byte, yield func(runtime.Object) error) (metav1.ListMeta, error) {
	var tm runtime.TypeMeta
	var raw []byte
	var encoded bool
	err := eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return tm.Unmarshal(v)
		case 2:
			raw = v
		case 3:
			encoded = len(v) > 0
		}
		return nil
	})
	switch {
	case err != nil:
		return metav1.ListMeta{}, err
	case tm.Kind != r.listKind:
		return metav1.ListMeta{}, fmt.Errorf("got kind %q, want %q", tm.Kind, r.listKind)
	case encoded:
		return metav1.ListMeta{}, fmt.Errorf("%s with a content encoding", tm.Kind)
	}
	var lm metav1.ListMeta
	err = eachField(raw, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return lm.Unmarshal(v)
		case 2:
			obj, err := r.decodeItem(v)
			if err != nil {
				return err
			}
			return yield(obj)
		}
		return nil
	})
	return lm, err
}

// eachField calls f with the number and bytes of each length-delimited
// field of the protobuf message b, in order, and skips the others.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := f(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// decodeWhole decodes a page in any other encoding (JSON) with
// client-go's codecs, as a typed client would, and yields its items.
func decodeWhole(b []byte, yield func(runtime.Object) error) (metav1.ListMeta, error) {
	list, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("decoding a list page: %w", err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("list page: %w", err)
	}
	out := metav1.ListMeta{ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(),
		RemainingItemCount: lm.GetRemainingItemCount()}
	return out, meta.EachListItem(list, yield)
}
