package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/munnerz/goautoneg"
	"sigs.k8s.io/yaml"
)

// Content negotiation of the z-pages, as component-base's (apiserver's
// flagz and statusz packages with their negotiation restrictions): no
// Accept header, or text/plain without a kind, gets the text page;
// application/json or application/yaml must name the structured kind
// (";as=Flagz;g=config.k8s.io;v=v1beta1", v1alpha1 deprecated); anything
// else is a 406 with a Status. CBOR is not offered: upstream offers it
// only with the alpha gate CBORServingAndStorage.

// zpageGroup is the API group of the structured z-pages.
const zpageGroup = "config.k8s.io"

// zpageVersions are the structured versions served; true marks deprecated.
var zpageVersions = map[string]bool{"v1alpha1": true, "v1beta1": false}

// zpageMediaTypes are offered in this order, as upstream's codec factory
// lists them (the order decides what "*/*" gets and the 406 message).
var zpageMediaTypes = []string{"application/json", "application/yaml", "text/plain"}

// zmedia is a negotiated answer: the media type, the version of a
// structured one ("" for text) and whether JSON is indented.
type zmedia struct {
	mediaType, version string
	pretty             bool
}

// negotiateZPage picks the answer for Accept; kind is "Flagz" or
// "Statusz". Without a kind (structured == false) only unversioned forms
// are acceptable, which is how upstream answers its errors.
func negotiateZPage(r *http.Request, kind string, structured bool) (zmedia, bool) {
	accept := r.Header.Get("Accept")
	if strings.TrimSpace(accept) == "" {
		return zmedia{mediaType: "text/plain"}, true
	}
	for _, clause := range goautoneg.ParseAccept(accept) {
		for _, offered := range zpageMediaTypes {
			typ, sub, _ := strings.Cut(offered, "/")
			if (clause.Type != typ || (clause.SubType != sub && clause.SubType != "*")) && (clause.Type != "*" || clause.SubType != "*") {
				continue
			}
			if m, ok := acceptZPage(clause.Params, offered, kind, structured); ok {
				m.pretty = m.pretty || prettyClient(r)
				return m, true
			}
		}
	}
	return zmedia{}, false
}

// acceptZPage applies upstream's restrictions to one Accept clause.
func acceptZPage(params map[string]string, offered, kind string, structured bool) (zmedia, bool) {
	m := zmedia{mediaType: offered, pretty: params["pretty"] == "1"}
	if params["stream"] != "" || params["sv"] != "" {
		return zmedia{}, false
	}
	_, as := params["as"]
	_, g := params["g"]
	_, v := params["v"]
	if !as && !g && !v {
		return m, offered == "text/plain" || !structured
	}
	_, known := zpageVersions[params["v"]]
	if !structured || offered == "text/plain" || params["as"] != kind || params["g"] != zpageGroup || !known {
		return zmedia{}, false
	}
	m.version = params["v"]
	return m, true
}

// prettyClient is upstream's isPrettyPrint: ?pretty=true, or a client
// that is a person's (curl, wget, a browser).
func prettyClient(r *http.Request) bool {
	if p := r.URL.Query().Get("pretty"); p != "" {
		b, _ := strconv.ParseBool(p)
		return b
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl") || strings.HasPrefix(ua, "Wget") || strings.HasPrefix(ua, "Mozilla/5.0")
}

// typeMeta and objectMeta are the structured pages' object header.
type typeMeta struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
}

type objectMeta struct {
	Name string `json:"name,omitempty"`
}

// writeStructured answers a negotiated structured request with obj, whose
// Kind and APIVersion it fills in.
func writeStructured(w http.ResponseWriter, m zmedia, page string, header *typeMeta, obj any) {
	header.APIVersion = zpageGroup + "/" + m.version
	if zpageVersions[m.version] {
		w.Header().Set("Warning", fmt.Sprintf(`299 - "This version of the %s endpoint is deprecated. Please use a newer version."`, page))
	}
	body, err := encodeZ(m, obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", fmt.Sprintf("%s;g=%s;v=%s;as=%s", m.mediaType, zpageGroup, m.version, header.Kind))
	_, _ = w.Write(body)
}

// encodeZ encodes as apimachinery's serializers do: compact JSON with a
// newline, indented JSON without one, YAML with sorted keys.
func encodeZ(m zmedia, obj any) ([]byte, error) {
	switch {
	case m.mediaType == "application/yaml":
		return yaml.Marshal(obj)
	case m.pretty:
		return json.MarshalIndent(obj, "", "  ")
	default:
		var b bytes.Buffer
		err := json.NewEncoder(&b).Encode(obj)
		return b.Bytes(), err
	}
}

// notAcceptable is upstream's 406: a Status in JSON or YAML when Accept
// allows one without a kind, else indented JSON.
func notAcceptable(w http.ResponseWriter, r *http.Request) {
	status := struct {
		typeMeta
		Metadata struct{} `json:"metadata"`
		Status   string   `json:"status"`
		Message  string   `json:"message"`
		Reason   string   `json:"reason"`
		Code     int      `json:"code"`
	}{typeMeta: typeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure",
		Message: "only the following media types are accepted: " + strings.Join(zpageMediaTypes, ", "),
		Reason:  "NotAcceptable", Code: http.StatusNotAcceptable}
	m, ok := negotiateZPage(r, "", false)
	if !ok || m.mediaType == "text/plain" {
		m = zmedia{mediaType: "application/json", pretty: true}
	}
	body, err := encodeZ(m, status)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", m.mediaType)
	w.WriteHeader(http.StatusNotAcceptable)
	_, _ = w.Write(body)
}
