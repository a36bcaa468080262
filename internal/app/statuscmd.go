package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/localapi"
	"github.com/svcproxy/svcproxy/internal/nodestatus"
)

// requestTimeout bounds one command's requests to the daemon.
const requestTimeout = 10 * time.Second

func newStatusCommand() *cobra.Command {
	socket, output := localapi.DefaultPath, ""
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what svcproxy on this node is doing",
		Long: `status asks the svcproxy running on this node (on its unix socket) how it is:
version, mode, iptables flavour, health, each IP family's last sync (when, what
kind, how long, how many service ports and endpoints), why the last sync
failed if it did, and the service ports the kernel rejected. Run it on the node
as root, for example with kubectl exec into the svcproxy pod.`,
		Example: `  svcproxy status
  kubectl -n kube-system exec ds/kube-proxy -- svcproxy status -o json`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			var s nodestatus.Status
			if err := getJSON(ctx, localapi.NewClient(socket), nodestatus.Path, &s); err != nil {
				return err
			}
			switch output {
			case "json":
				return writeIndented(cmd.OutOrStdout(), s)
			case "":
				return nodestatus.WriteStatus(cmd.OutOrStdout(), s, time.Now())
			}
			return fmt.Errorf("--output %q: want json, or nothing for text", output)
		},
	}
	cmd.Flags().StringVar(&socket, "state-socket", socket, "the unix socket svcproxy serves its state on (its --state-socket)")
	cmd.Flags().StringVarP(&output, "output", "o", output, "output format: json (default: text)")
	return cmd
}

type servicesOptions struct {
	socket, output  string
	quarantinedOnly bool
}

func newServicesCommand() *cobra.Command {
	o := servicesOptions{socket: localapi.DefaultPath}
	cmd := &cobra.Command{
		Use:   "services",
		Short: "List the service ports svcproxy programmed on this node",
		Long: `services lists every service port svcproxy on this node programmed, per IP
family: cluster IP, ports, endpoints, and whether the kernel serves it or
rejected it (quarantined, with since when; -o wide adds the external frontends,
traffic policies, affinity, the endpoints and the kernel's error). It asks the
daemon on its unix socket: run it on the node as root.`,
		Example: `  svcproxy services
  svcproxy services --quarantined -o wide
  kubectl -n kube-system exec ds/kube-proxy -- svcproxy services -o json`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.socket, "state-socket", o.socket, "the unix socket svcproxy serves its state on (its --state-socket)")
	fs.StringVarP(&o.output, "output", "o", "", "output format: wide or json (default: a table for 80 columns)")
	fs.BoolVar(&o.quarantinedOnly, "quarantined", false, "only the service ports the kernel rejected")
	return cmd
}

func (o servicesOptions) run(ctx context.Context, w io.Writer) error {
	if o.output != "" && o.output != "wide" && o.output != "json" {
		return fmt.Errorf("--output %q: want wide or json", o.output)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	c := localapi.NewClient(o.socket)
	var s nodestatus.Status
	if err := getJSON(ctx, c, nodestatus.Path, &s); err != nil {
		return err
	}
	var dump debugstate.Dump
	if err := getJSON(ctx, c, debugstate.Path, &dump); err != nil {
		return err
	}
	rows := nodestatus.Rows(dump.States, s, o.quarantinedOnly)
	if o.output == "json" {
		return writeIndented(w, rows)
	}
	return nodestatus.WriteServices(w, rows, o.output == "wide", time.Now())
}

// getJSON decodes the daemon's answer at path into v.
func getJSON(ctx context.Context, c *localapi.Client, path string, v any) error {
	body, err := c.Get(ctx, path)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := json.NewDecoder(io.LimitReader(body, maxStateBytes)).Decode(v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
