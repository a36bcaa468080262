package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/internal/localapi"
	"github.com/svcproxy/svcproxy/internal/nodestatus"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// addSubcommands adds svcproxy's own subcommands. kube-proxy has none, so
// cobra's generated "completion" command is left out to keep the command
// line kube-proxy's plus ours.
func addSubcommands(root *cobra.Command) {
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newExplainCommand(), newStatusCommand(), newServicesCommand(), newVersionCommand())
}

type explainOptions struct {
	socket            string
	source            string
	fromPod, fromHost bool
	json              bool
}

func newExplainCommand() *cobra.Command {
	o := explainOptions{socket: localapi.DefaultPath}
	cmd := &cobra.Command{
		Use:   "explain DEST_IP:PORT[/PROTO]",
		Short: "Explain how this node handles a packet to a Service address",
		Long: `explain asks the svcproxy running on this node (on its unix socket) for the
state it last programmed and prints how a new connection to DEST_IP:PORT/PROTO
is handled: the Service port and frontend it matches, the traffic policy and
endpoints that apply and why, affinity, masquerade, and the kernel objects that
implement it. PROTO is TCP (default), UDP or SCTP. Run it on the node as root,
for example with kubectl exec into the svcproxy pod: the socket is root's only.`,
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
	fs.StringVar(&o.socket, "state-socket", o.socket, "the unix socket svcproxy serves its state on (its --state-socket)")
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	mode, state, err := fetchState(ctx, localapi.NewClient(o.socket), proxy.FamilyOf(pkt.Dest))
	if err != nil {
		return err
	}
	e := explain.Explain(state, pkt)
	var status nodestatus.Status
	if err := getJSON(ctx, localapi.NewClient(o.socket), nodestatus.Path, &status); err == nil {
		markQuarantined(&e, state, pkt, status)
	}
	objects, err := kernelObjects(ctx, backends.Table, proxy.Mode(mode), state, e)
	if err != nil {
		objects = append(objects, "(cannot name them: "+err.Error()+")")
	}
	if o.json {
		return e.WriteJSON(w, mode, objects)
	}
	return e.Write(w, mode, objects)
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

// fetchState gets the proxy mode and the last programmed State of family.
func fetchState(ctx context.Context, c *localapi.Client, family proxy.IPFamily) (string, *desired.State, error) {
	body, err := c.Get(ctx, debugstate.Path+"?family="+url.QueryEscape(string(family)))
	if err != nil {
		return "", nil, err
	}
	defer body.Close()
	var dump debugstate.Dump
	if err := json.NewDecoder(io.LimitReader(body, maxStateBytes)).Decode(&dump); err != nil {
		return "", nil, fmt.Errorf("decoding the state: %w", err)
	}
	if len(dump.States) == 0 {
		return "", nil, fmt.Errorf("svcproxy has not programmed any %s state yet (no successful sync)", family)
	}
	state, err := dump.States[0].Decode()
	return dump.Mode, state, err
}

// kernelObjects lists the kernel objects that implement e, named by the
// row of mode, the mode of the daemon that programmed state.
func kernelObjects(ctx context.Context, reg backends.Registry, mode proxy.Mode, state *desired.State, e explain.Explanation) ([]string, error) {
	if e.Port == nil {
		return nil, nil
	}
	b, err := reg.Lookup(mode)
	if err != nil {
		return nil, fmt.Errorf("unknown proxy mode %q", mode)
	}
	return b.Objects(ctx, state, e)
}

// maxStateBytes bounds what explain reads from the socket, far above any
// real cluster's state.
const maxStateBytes = 1 << 30

// markQuarantined tells e when pkt is for a service port the kernel
// rejected: its rejected version, alone in state, would take the packet.
func markQuarantined(e *explain.Explanation, state *desired.State, pkt explain.Packet, s nodestatus.Status) {
	for _, f := range s.Families {
		if f.Family != state.Family {
			continue
		}
		for _, q := range f.Quarantined {
			if q.Rejected == nil {
				continue
			}
			sp, err := q.Rejected.Decode()
			if err != nil {
				continue
			}
			alone := *state
			alone.Services = model.PortMap[*desired.ServicePort]{}.With(sp.Name, sp)
			if explain.Explain(&alone, pkt).Port != nil {
				e.Quarantined(explain.Quarantine{ServicePort: sp.Name.String(), Since: q.Since, Error: q.Error, Kernel: q.Kernel})
				return
			}
		}
	}
}
