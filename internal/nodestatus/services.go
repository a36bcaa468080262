package nodestatus

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Service statuses.
const (
	StatusProgrammed  = "programmed"
	StatusQuarantined = "quarantined"
)

// ServiceRow is one service port of one family in `svcproxy services`.
type ServiceRow struct {
	Family proxy.IPFamily `json:"family"`
	Status string         `json:"status"`
	// Port is the version the kernel serves; for a quarantined port of
	// which it serves nothing, the rejected version (if known).
	Port       *debugstate.ServicePort `json:"servicePort,omitempty"`
	Quarantine *Quarantined            `json:"quarantine,omitempty"`
}

// Rows lists every service port of the programmed states and of the
// quarantine, sorted by name then family; quarantinedOnly keeps the
// quarantined ones.
func Rows(states []debugstate.State, status Status, quarantinedOnly bool) []ServiceRow {
	type key struct {
		family proxy.IPFamily
		name   proxy.ServicePortName
	}
	rows := map[key]*ServiceRow{}
	for _, st := range states {
		for i := range st.Services {
			p := &st.Services[i]
			rows[key{st.Family, wireName(p)}] = &ServiceRow{Family: st.Family, Status: StatusProgrammed, Port: p}
		}
	}
	for _, f := range status.Families {
		for i := range f.Quarantined {
			q := &f.Quarantined[i]
			k := key{f.Family, q.ServicePortName()}
			r := rows[k]
			if r == nil {
				r = &ServiceRow{Family: f.Family, Port: q.Rejected}
				rows[k] = r
			}
			r.Status, r.Quarantine = StatusQuarantined, q
		}
	}
	out := make([]ServiceRow, 0, len(rows))
	for _, r := range rows {
		if !quarantinedOnly || r.Quarantine != nil {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b ServiceRow) int {
		return cmp.Or(rowName(a).Compare(rowName(b)), cmp.Compare(a.Family, b.Family))
	})
	return out
}

func wireName(p *debugstate.ServicePort) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: p.Namespace, Name: p.Name},
		Port: p.PortName, Protocol: p.Protocol}
}

func rowName(r ServiceRow) proxy.ServicePortName {
	if r.Quarantine != nil {
		return r.Quarantine.ServicePortName()
	}
	return wireName(r.Port)
}

// WriteServices prints rows as a table, like kubectl get: the default
// columns fit 80 columns for usual names; wide adds external frontends,
// policies, affinity, the endpoints themselves, and since when and why a
// port is quarantined.
func WriteServices(w io.Writer, rows []ServiceRow, wide bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "SERVICE PORT\tCLUSTER-IP\tPORT(S)\tENDPOINTS\tSTATUS"
	if wide {
		header += "\tEXTERNAL\tPOLICY\tAFFINITY\tENDPOINT LIST\tQUARANTINED\tKERNEL ERROR"
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(rowCells(r, wide, now), "\t"))
	}
	return tw.Flush()
}

func rowCells(r ServiceRow, wide bool, now time.Time) []string {
	name, clusterIP, ports, eps, status := rowName(r).String(), "-", "-", "-", r.Status
	p := r.Port
	if p != nil {
		clusterIP, ports = p.ClusterIP.String(), portsCell(p)
		if r.Quarantine == nil || r.Quarantine.Kernel != KernelServesNothing {
			eps = fmt.Sprint(len(p.Internal.Endpoints))
		}
	}
	cells := []string{name, clusterIP, ports, eps, status}
	if !wide {
		return cells
	}
	ext, policy, affinity, list, since, kerr := "-", "-", "-", "-", "-", "-"
	if p != nil {
		ext, policy = externalCell(p), policyCell(p)
		if eps != "-" {
			list = endpointsCell(p.Internal.Endpoints)
		}
		if p.AffinitySeconds > 0 {
			affinity = fmt.Sprintf("ClientIP/%ds", p.AffinitySeconds)
		}
	}
	if q := r.Quarantine; q != nil {
		since, kerr = ago(q.Since, now), q.Error+" (kernel serves "+q.Kernel+")"
	}
	return append(cells, ext, policy, affinity, list, since, kerr)
}

// portsCell is kubectl's PORT(S): 80/TCP, or 80:30080/TCP with a node port.
func portsCell(p *debugstate.ServicePort) string {
	if p.NodePort != 0 {
		return fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
	}
	return fmt.Sprintf("%d/%s", p.Port, p.Protocol)
}

func externalCell(p *debugstate.ServicePort) string {
	all := append(slices.Clone(p.ExternalIPs), p.LoadBalancerIPs...)
	if len(all) == 0 {
		return "-"
	}
	return joinAddrs(all)
}

// policyCell is the traffic policies, internal then external.
func policyCell(p *debugstate.ServicePort) string {
	word := func(local bool) string {
		if local {
			return "Local"
		}
		return "Cluster"
	}
	return "iTP=" + word(p.InternalLocal) + ",eTP=" + word(p.ExternalLocal)
}

func endpointsCell(eps []netip.AddrPort) string {
	if len(eps) == 0 {
		return "-"
	}
	parts := make([]string, len(eps))
	for i, ep := range eps {
		parts[i] = ep.String()
	}
	return strings.Join(parts, ",")
}

func joinAddrs(addrs []netip.Addr) string {
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",")
}
