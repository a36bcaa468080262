package localapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Client asks a daemon's local API over its socket.
type Client struct {
	path string
	http *http.Client
	// retryWait is the pause before asking again after a 503.
	retryWait time.Duration
}

// NewClient returns a Client of the socket at path.
func NewClient(path string) *Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	// No Proxy: an HTTP_PROXY in the environment must not turn a request
	// to the socket into a request to a proxy.
	tr := &http.Transport{DialContext: dial, Proxy: nil, DisableKeepAlives: true}
	return &Client{path: path, http: &http.Client{Transport: tr}, retryWait: 200 * time.Millisecond}
}

// Get returns the body of GET route (a path with its query). While the
// daemon serves another request (503) it asks again until ctx ends. Any
// status but 200 is an error that says what to do; the caller closes the
// body.
func (c *Client) Get(ctx context.Context, route string) (io.ReadCloser, error) {
	for {
		resp, err := c.get(ctx, route)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return resp.Body, nil
		}
		msg := firstLine(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusServiceUnavailable:
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("svcproxy stayed busy with other requests on %s: %w", c.path, ctx.Err())
			case <-time.After(c.retryWait):
			}
		case http.StatusNotFound:
			return nil, fmt.Errorf("%s: not found on %s (an older svcproxy?)", route, c.path)
		default:
			return nil, fmt.Errorf("%s: %s: %s", route, resp.Status, msg)
		}
	}
}

func (c *Client) get(ctx context.Context, route string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://svcproxy"+route, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", route, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking svcproxy on its socket %s (is it running on this node, with this --state-socket, and are you root?): %w", c.path, err)
	}
	return resp, nil
}

// firstLine is the start of an error body, for the error message.
func firstLine(r io.Reader) string {
	line, _ := bufio.NewReader(io.LimitReader(r, 512)).ReadString('\n')
	return strings.TrimSpace(line)
}
