package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// addSubcommands adds svcproxy's own subcommands. kube-proxy has none, so
// cobra's generated "completion" command is left out to keep the command
// line kube-proxy's plus ours.
func addSubcommands(root *cobra.Command) {
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newExplainCommand())
}

type explainOptions struct {
	server            string
	source            string
	fromPod, fromHost bool
	json              bool
}

func newExplainCommand() *cobra.Command {
	o := explainOptions{server: "http://127.0.0.1:10249"}
	cmd := &cobra.Command{
		Use:   "explain DEST_IP:PORT[/PROTO]",
		Short: "Explain how this node handles a packet to a Service address",
		Long: `explain asks the svcproxy running on this node (its metrics server) for the
state it last programmed and prints how a new connection to DEST_IP:PORT/PROTO
is handled: the Service port and frontend it matches, the traffic policy and
endpoints that apply and why, affinity, masquerade, and the kernel objects that
implement it. PROTO is TCP (default), UDP or SCTP. Run it on the node (for
example with kubectl exec into the svcproxy pod): the state is served to
loopback clients only.`,
		Example: `  svcproxy explain 10.96.0.10:53/UDP --from-pod
  svcproxy explain 192.168.0.10:30080 --source 203.0.113.7
  svcproxy explain [fd00::10]:443/TCP --from-host
  svcproxy explain 10.96.0.10:80 --from-pod --json`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.server, "server", o.server, "URL of svcproxy's metrics server (metricsBindAddress)")
	fs.StringVar(&o.source, "source", "", "source IP of the packet (decides pod vs external with a CIDR detector, hairpin, loadBalancerSourceRanges)")
	fs.BoolVar(&o.fromPod, "from-pod", false, "the packet comes from a pod on this node")
	fs.BoolVar(&o.fromHost, "from-host", false, "the packet comes from the node itself")
	fs.BoolVar(&o.json, "json", false, "print the explanation as JSON (verdict, service, endpoints, masquerade, reasons, kernel objects)")
	cmd.MarkFlagsMutuallyExclusive("from-pod", "from-host")
	return cmd
}

func (o explainOptions) run(ctx context.Context, w io.Writer, target string) error {
	pkt, err := o.packet(target)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 10 * time.Second}
	mode, err := fetch(ctx, c, o.server+"/proxyMode")
	if err != nil {
		return err
	}
	state, err := fetchState(ctx, c, o.server, proxy.FamilyOf(pkt.Dest))
	if err != nil {
		return err
	}
	e := explain.Explain(state, pkt)
	m := strings.TrimSpace(string(mode))
	objects, err := explain.Objects(ctx, m, state, e)
	if err != nil {
		objects = append(objects, "(cannot name them: "+err.Error()+")")
	}
	if o.json {
		return e.WriteJSON(w, m, objects)
	}
	return e.Write(w, m, objects)
}

// packet parses DEST_IP:PORT[/PROTO] and the source flags.
func (o explainOptions) packet(target string) (explain.Packet, error) {
	addr, proto, found := strings.Cut(target, "/")
	p := explain.Packet{Protocol: proxy.TCP}
	if found {
		p.Protocol = proxy.Protocol(strings.ToUpper(proto))
		if p.Protocol != proxy.TCP && p.Protocol != proxy.UDP && p.Protocol != proxy.SCTP {
			return p, fmt.Errorf("protocol %q: must be TCP, UDP or SCTP", proto)
		}
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return p, fmt.Errorf("destination %q: want IP:PORT or [IPv6]:PORT: %w", addr, err)
	}
	p.Dest, p.Port = ap.Addr().Unmap(), ap.Port()
	if o.source != "" {
		if p.Source, err = netip.ParseAddr(o.source); err != nil {
			return p, fmt.Errorf("--source: %w", err)
		}
		p.Source = p.Source.Unmap()
	}
	switch {
	case o.fromPod:
		p.Origin = explain.OriginPod
	case o.fromHost:
		p.Origin = explain.OriginHost
	}
	return p, nil
}

// fetchState gets the last programmed State of family.
func fetchState(ctx context.Context, c *http.Client, server string, family proxy.IPFamily) (*desired.State, error) {
	body, err := fetch(ctx, c, server+debugstate.Path+"?family="+url.QueryEscape(string(family)))
	if err != nil {
		return nil, err
	}
	var dump debugstate.Dump
	if err := json.Unmarshal(body, &dump); err != nil {
		return nil, fmt.Errorf("decoding the state: %w", err)
	}
	if len(dump.States) == 0 {
		return nil, fmt.Errorf("svcproxy has not programmed any %s state yet (no successful sync)", family)
	}
	return dump.States[0].Decode()
}

func fetch(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", u, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking svcproxy (is it running, and is --server its metricsBindAddress?): %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", u, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body, nil
	case http.StatusForbidden:
		return nil, errors.New("svcproxy serves its state to loopback clients only: run explain on the node, e.g. kubectl exec into the svcproxy pod")
	case http.StatusNotFound:
		return nil, fmt.Errorf("%s: not found (a kube-proxy, or a svcproxy without the debug state endpoint?)", u)
	}
	return nil, fmt.Errorf("%s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
}
