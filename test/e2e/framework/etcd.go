package framework

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// etcdPort is hack/controlplane.sh's default client port; etcd listens on
// the cp namespace's loopback only.
const etcdPort = 12379

// PutRaw writes value under key straight into etcd (its JSON gateway,
// /v3/kv/put), behind the API server's back. kube-apiserver v1.37
// validates EndpointSlice addresses strictly, so an object svcproxy must
// survive (a malformed address, as older servers stored or a buggy writer
// could) can only be made this way. The API server decodes JSON from
// storage as well as protobuf and passes the object to watchers as is.
func (c *Cluster) PutRaw(key string, value []byte) error {
	body, err := json.Marshal(map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte(key)),
		"value": base64.StdEncoding.EncodeToString(value),
	})
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: DialerIn(c.NS("cp")), DisableKeepAlives: true, Proxy: nil}}
	resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/v3/kv/put", etcdPort), "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("etcd put %s: %w", key, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd put %s: HTTP %d: %s", key, resp.StatusCode, out)
	}
	return nil
}
