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
	req := map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte(key)),
		"value": base64.StdEncoding.EncodeToString(value),
	}
	client := c.etcdClient()
	client.Timeout = 10 * time.Second
	if err := c.etcdCall(client, "/v3/kv/put", req, nil); err != nil {
		return fmt.Errorf("etcd put %s: %w", key, err)
	}
	return nil
}

// KV is one etcd key and its value.
type KV struct {
	Key   string
	Value []byte
}

// etcdMaxTxnOps is etcd's default --max-txn-ops.
const etcdMaxTxnOps = 128

// PutRawBatch writes kvs straight into etcd like PutRaw, up to
// etcdMaxTxnOps keys per transaction (/v3/kv/txn): a benchmark's seed of
// tens of thousands of objects in seconds.
func (c *Cluster) PutRawBatch(kvs []KV) error {
	client := c.etcdClient()
	for len(kvs) > 0 {
		n := min(len(kvs), etcdMaxTxnOps)
		var ops []map[string]any
		for _, kv := range kvs[:n] {
			ops = append(ops, map[string]any{"requestPut": map[string]string{
				"key":   base64.StdEncoding.EncodeToString([]byte(kv.Key)),
				"value": base64.StdEncoding.EncodeToString(kv.Value),
			}})
		}
		if err := c.etcdCall(client, "/v3/kv/txn", map[string]any{"success": ops}, nil); err != nil {
			return fmt.Errorf("etcd txn of %d puts from %s: %w", n, kvs[0].Key, err)
		}
		kvs = kvs[n:]
	}
	return nil
}

// GetRaw reads the values of the keys under prefix (keysOnly: their names
// only), straight from etcd.
func (c *Cluster) GetRaw(prefix string, keysOnly bool) ([]KV, error) {
	end := []byte(prefix)
	end[len(end)-1]++
	var out struct {
		Kvs []struct{ Key, Value []byte }
	}
	err := c.etcdCall(c.etcdClient(), "/v3/kv/range", map[string]any{
		"key":       base64.StdEncoding.EncodeToString([]byte(prefix)),
		"range_end": base64.StdEncoding.EncodeToString(end),
		"keys_only": keysOnly,
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("etcd range %s: %w", prefix, err)
	}
	kvs := make([]KV, 0, len(out.Kvs))
	for _, kv := range out.Kvs {
		kvs = append(kvs, KV{Key: string(kv.Key), Value: kv.Value})
	}
	return kvs, nil
}

func (c *Cluster) etcdClient() *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: DialerIn(c.NS("cp")), Proxy: nil}}
}

// etcdCall posts req as JSON to etcd's gateway and decodes the answer into
// resp (unless nil). The gateway's JSON carries bytes as base64, which
// encoding/json decodes into []byte fields.
func (c *Cluster) etcdCall(client *http.Client, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d%s", etcdPort, path), "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer r.Body.Close()
	out, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.500s", r.StatusCode, out)
	}
	if resp == nil {
		return nil
	}
	return json.Unmarshal(out, resp)
}
